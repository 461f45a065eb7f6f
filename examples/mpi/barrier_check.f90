! barrier_check.f90: MPI_BARRIER in a loop from Fortran, checked the same way as barrier_check.c:
! every rank publishes its arrival count in a shared window (MPI_WIN_ALLOCATE_SHARED) and after
! every barrier reads every other count. Open MPI's Fortran MPI_BARRIER calls PMPI_Barrier
! directly, so the interposer must define the Fortran entry points for this program to get it.
!
!   mpifort -O2 -o barrier_check_f barrier_check.f90
!   mpirun -np 4 -x LD_PRELOAD=target/release/libbarrier_pmpi.so -x BARRIER_VERBOSE=1 ./barrier_check_f 2000
program barrier_check
    use mpi
    use, intrinsic :: iso_c_binding
    implicit none
    integer :: ierr, rank, nprocs, machine, win, msize, p, unit, nargs
    integer(kind=MPI_ADDRESS_KIND) :: winsize, addr, qsize
    integer(kind=8) :: i, iters, seen
    integer(kind=8), pointer, volatile :: mine, other
    type(c_ptr), allocatable :: counts(:)
    character(len=32) :: arg

    iters = 1000
    nargs = command_argument_count()
    if (nargs >= 1) then
        call get_command_argument(1, arg)
        read (arg, *) iters
    end if

    call MPI_INIT(ierr)
    call MPI_COMM_RANK(MPI_COMM_WORLD, rank, ierr)
    call MPI_COMM_SIZE(MPI_COMM_WORLD, nprocs, ierr)
    call MPI_COMM_SPLIT_TYPE(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, machine, ierr)
    call MPI_COMM_SIZE(machine, msize, ierr)
    if (msize /= nprocs) then
        if (rank == 0) write (0, *) 'barrier_check_f: all ranks must run on one machine'
        call MPI_ABORT(MPI_COMM_WORLD, 2, ierr)
    end if

    winsize = 8
    call MPI_WIN_ALLOCATE_SHARED(winsize, 8, MPI_INFO_NULL, machine, addr, win, ierr)
    call c_f_pointer(transfer(addr, c_null_ptr), mine)
    allocate (counts(msize))
    do p = 0, msize - 1
        call MPI_WIN_SHARED_QUERY(win, p, qsize, unit, addr, ierr)
        counts(p + 1) = transfer(addr, c_null_ptr)
    end do
    call MPI_WIN_LOCK_ALL(0, win, ierr)
    mine = 0
    call MPI_WIN_SYNC(win, ierr)
    call MPI_BARRIER(machine, ierr)

    do i = 1, iters
        if (mod(i * (rank + 1), 97_8) == 0) call busy_wait(20000 * (rank + 1))
        mine = i
        call MPI_WIN_SYNC(win, ierr)
        call MPI_BARRIER(MPI_COMM_WORLD, ierr)
        if (ierr /= MPI_SUCCESS) then
            write (0, *) 'barrier_check_f: MPI_BARRIER failed on rank', rank
            call MPI_ABORT(MPI_COMM_WORLD, 1, ierr)
        end if
        call MPI_WIN_SYNC(win, ierr)
        do p = 1, msize
            call c_f_pointer(counts(p), other)
            seen = other
            if (seen < i .or. seen > i + 1) then
                write (0, '(a,i0,a,i0,a,i0,a,i0)') 'barrier_check_f: FAILED: rank ', rank, ' sees machine rank ', &
                    p - 1, ' at ', seen, ' after barrier ', i
                call MPI_ABORT(MPI_COMM_WORLD, 1, ierr)
            end if
        end do
    end do

    write (6, '(a,i0,a,i0,a,i0,a)') 'barrier_check_f: rank ', rank, ' of ', nprocs, ': ', iters, &
        ' checked barriers passed'
    call MPI_WIN_UNLOCK_ALL(win, ierr)
    call MPI_WIN_FREE(win, ierr)
    call MPI_COMM_FREE(machine, ierr)
    call MPI_FINALIZE(ierr)

contains

    ! A little work so that this rank arrives late.
    subroutine busy_wait(n)
        integer, intent(in) :: n
        integer :: k
        real(kind=8), volatile :: x
        x = 0
        do k = 1, n
            x = x + 1.0d0 / k
        end do
    end subroutine busy_wait
end program barrier_check
