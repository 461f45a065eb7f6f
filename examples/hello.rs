//! Hello world: every rank says hello, then checks that all of them did before anyone left
//! the barrier. Run it with `barrier run -n 4 -- target/release/examples/hello`.

use std::sync::atomic::Ordering;

fn main() -> Result<(), barrier::Report> {
    let universe = barrier::init()?;
    let world = universe.world();
    let greetings = world.shared_window(1)?;
    println!(
        "hello from rank {} of {} on node {} (backend {}, algorithm {}, wait policy {})",
        world.rank(),
        world.size(),
        world.node(),
        world.backend(),
        world.algorithm(),
        world.wait_policy()
    );
    greetings.words()[0].fetch_add(1, Ordering::Relaxed);
    world.barrier()?;
    let said = greetings.words()[0].load(Ordering::Relaxed);
    assert_eq!(said, world.size() as u64, "rank {} passed the barrier after only {said} hellos", world.rank());
    world.barrier()?;
    Ok(())
}
