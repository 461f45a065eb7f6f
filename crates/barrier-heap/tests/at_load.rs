//! The fork handlers are registered when the program is loaded, before `main` and before any
//! allocation from a heap of this crate (this test binary allocates from none: its global
//! allocator is the system's). A registration left to the first allocation could be copied
//! half done into a child forked meanwhile, which then waited for ever.

#[test]
fn loading_registers_the_fork_handlers() {
    assert!(barrier_heap::fork_handlers_registered(), "the .init_array entry did not run before main");
}
