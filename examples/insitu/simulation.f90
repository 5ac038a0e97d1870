! In-situ training, the simulation side: a 1-D heat equation on a periodic
! grid, split over the MPI ranks (2 in examples/insitu/run.sh), publishing
! every timestep into a method-2 store that a training job of another
! mpiexec joins while this runs.
!
! Each rank writes, at step t, one row into slot mod(t, SLOTS) of its ring
! of the newest SLOTS steps (a versioned variable, one generation counter
! per row, so a reader never sees a row half of step t and half of t+SLOTS):
!   row = [ t, u_t(0:NX+1) (its cells with one halo cell each side),
!           u_{t+1}(1:NX), check ]
! where `check` holds the XOR of the 64-bit patterns of all other values, so
! the reader can verify that a row is exactly one step's write. The store
! also holds "insitu/__structure__", the JSON sample description that
! pyddstore.torch's DistDatasetReader reads, so the trainer opens the ring
! as an ordinary dataset.
!
! Environment: DDSTORE_HANDSHAKE_DIR (publication directory), INSITU_STOP_FILE
! (stop when it exists), INSITU_MAX_SECONDS (stop anyway; default 60),
! INSITU_STEP_US (pause per step, standing in for real work; default 500),
! INSITU_PLAIN=1 (a plain, not versioned, variable: to see what the
! trainer's check catches without versioning).
program simulation
  use, intrinsic :: iso_c_binding
  use mpi_f08
  use ddstore
  implicit none
  integer, parameter :: NX = 32, SLOTS = 16, EPISODE = 40
  integer, parameter :: L = 1 + (NX + 2) + NX + 1   ! values per row
  real(c_double), parameter :: R = 0.2d0            ! diffusion number of the explicit scheme
  character(len=*), parameter :: JSON = '{"version": 1, "container": "dict", "namedtuple": null, ' // &
    '"fields": [[["str", "row"], "tensor", "float64", [68]]]}'
  interface
    function usleep(us) bind(C, name="usleep")
      import :: c_int
      integer(c_int), value :: us
      integer(c_int) :: usleep
    end function usleep
  end interface
  type(c_ptr) :: s
  type(dds_options), target :: opts
  character(kind=c_char), allocatable, target :: hsdir(:), jsbytes(:)
  real(c_double) :: u(0:NX + 1), un(NX)
  real(c_double), target :: row(L)
  integer :: rank, nproc, left, right, i, ios, step_us
  integer(c_int) :: rc
  integer(c_int64_t) :: t, chk, nbytes
  character(len=4096) :: env, stop_file
  logical :: stop_now, ios_exists
  real(c_double) :: t0, max_s

  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, nproc)
  left = modulo(rank - 1, nproc)
  right = modulo(rank + 1, nproc)
  if (L /= 68) error stop "row length and JSON shape disagree"

  call get_environment_variable("DDSTORE_HANDSHAKE_DIR", env)
  if (len_trim(env) == 0) env = "./ddstore_hs"
  hsdir = to_c(trim(env))
  call get_environment_variable("INSITU_STOP_FILE", stop_file)
  call get_environment_variable("INSITU_MAX_SECONDS", env)
  max_s = 60
  if (len_trim(env) > 0) read (env, *, iostat=ios) max_s
  call get_environment_variable("INSITU_STEP_US", env)
  step_us = 500
  if (len_trim(env) > 0) read (env, *, iostat=ios) step_us

  ! ---- the store: method 2, published in the handshake directory
  call dds_options_init(c_loc(opts))
  opts%method = DDS_METHOD_FILE
  opts%handshake_dir = c_loc(hsdir)
  call ok(dds_create(s, MPI_COMM_WORLD%MPI_VAL, c_loc(opts)), "dds_create")
  call get_environment_variable("INSITU_PLAIN", env)
  if (trim(env) == "1") then
    ! For comparison only: a plain variable, whose rows readers can see torn.
    call ok(dds_init(s, "insitu/row"//c_null_char, int(SLOTS, c_int64_t), int(8 * L, c_int64_t), &
                     DDS_DTYPE_FLOAT64), "dds_init")
  else
    call ok(dds_init_versioned(s, "insitu/row"//c_null_char, int(SLOTS, c_int64_t), int(8 * L, c_int64_t), &
                               DDS_DTYPE_FLOAT64, 1_c_int64_t), "dds_init_versioned")
  end if
  ! The dataset description last: a reader that finds it finds the ring too.
  jsbytes = to_c(JSON)
  nbytes = merge(int(len(JSON), c_int64_t), 0_c_int64_t, rank == 0)
  call ok(dds_add(s, "insitu/__structure__"//c_null_char, c_loc(jsbytes), nbytes, 1_c_int64_t, &
                  DDS_DTYPE_UINT8), "dds_add structure")
  if (rank == 0) print '(a, i0, a, i0, a)', "simulation: ", nproc, " ranks publishing a ring of ", SLOTS, &
    " steps per rank (method 2)"

  ! ---- time stepping
  t0 = MPI_Wtime()
  t = 0
  do
    if (mod(t, int(EPISODE, c_int64_t)) == 0) call initial_field(t / EPISODE)
    call MPI_Sendrecv(u(NX), 1, MPI_DOUBLE_PRECISION, right, 0, u(0), 1, MPI_DOUBLE_PRECISION, left, 0, &
                      MPI_COMM_WORLD, MPI_STATUS_IGNORE)
    call MPI_Sendrecv(u(1), 1, MPI_DOUBLE_PRECISION, left, 1, u(NX + 1), 1, MPI_DOUBLE_PRECISION, right, 1, &
                      MPI_COMM_WORLD, MPI_STATUS_IGNORE)
    do i = 1, NX
      un(i) = u(i) + R * (u(i - 1) - 2 * u(i) + u(i + 1))
    end do
    t = t + 1
    row(1) = real(t, c_double)
    row(2:NX + 3) = u(0:NX + 1)
    row(NX + 4:2 * NX + 3) = un
    chk = 0
    do i = 1, L - 1
      chk = ieor(chk, transfer(row(i), chk))
    end do
    row(L) = transfer(chk, row(L))
    ! Local and one-sided: readers see the old row or the new one, never a mix.
    call ok(dds_update(s, "insitu/row"//c_null_char, c_loc(row), 1_c_int64_t, mod(t, int(SLOTS, c_int64_t))), &
            "dds_update")
    u(1:NX) = un
    if (step_us > 0) rc = usleep(int(step_us, c_int))
    if (mod(t, 20_c_int64_t) == 0) then
      if (rank == 0) then
        stop_now = MPI_Wtime() - t0 > max_s
        if (len_trim(stop_file) > 0) then
          inquire (file=trim(stop_file), exist=ios_exists)
          stop_now = stop_now .or. ios_exists
        end if
      end if
      call MPI_Bcast(stop_now, 1, MPI_LOGICAL, 0, MPI_COMM_WORLD)
      if (stop_now) exit
    end if
  end do
  if (rank == 0) print '(a, i0, a, f6.2, a)', "simulation: published ", t, " steps in ", MPI_Wtime() - t0, " s"
  call ok(dds_free(s), "dds_free")
  call MPI_Finalize()

contains

  ! A random field for episode `e`, noise plus a few waves (the same on
  ! every rank: it depends on the global cell index only).
  subroutine initial_field(e)
    integer(c_int64_t), intent(in) :: e
    integer :: k, g
    real(c_double) :: amp(3), ph(3), x
    do k = 1, 3
      amp(k) = lcg(e * 7 + k) - 0.5d0
      ph(k) = 6.283185307179586d0 * lcg(e * 7 + k + 3)
    end do
    do i = 1, NX
      g = rank * NX + i - 1
      x = 6.283185307179586d0 * g / (nproc * NX)
      u(i) = lcg(e * 100003 + g) - 0.5d0   ! white noise: makes the stencil identifiable
      do k = 1, 3
        u(i) = u(i) + amp(k) * sin(k * x + ph(k))
      end do
    end do
  end subroutine initial_field

  pure function lcg(n) result(x)
    integer(c_int64_t), intent(in) :: n
    real(c_double) :: x
    integer(c_int64_t) :: z
    z = modulo(48271_c_int64_t * modulo(n * 7919_c_int64_t + 17_c_int64_t, 2147483647_c_int64_t), &
               2147483647_c_int64_t)
    x = real(z, c_double) / 2147483647d0
  end function lcg

  pure function to_c(text) result(chars)
    character(len=*), intent(in) :: text
    character(kind=c_char), allocatable :: chars(:)
    integer :: k
    allocate(chars(len(text) + 1))
    do k = 1, len(text)
      chars(k) = text(k:k)
    end do
    chars(len(text) + 1) = c_null_char
  end function to_c

  subroutine ok(code, what)
    integer(c_int), intent(in) :: code
    character(len=*), intent(in) :: what
    if (code /= DDS_OK) then
      write (*, '(a, i0, 4a)') "simulation rank ", rank, ": ", what, " failed: ", dds_last_error_string()
      call MPI_Abort(MPI_COMM_WORLD, 1)
    end if
  end subroutine ok
end program simulation
