! Test of the Fortran module `ddstore` under mpiexec (1 to 4 ranks), built
! the way users build: mpifort $(pkg-config --cflags --libs libddstore).
! create, add, init/update/sync, get, get_batch, get_ranges, query, offsets,
! listing, a versioned variable and its generation counter, bad input with
! its message on every rank, stats, free. Any failed check aborts the job.
program test_fortran
  use, intrinsic :: iso_c_binding
  use mpi_f08
  use ddstore
  implicit none
  integer, parameter :: W = 4            ! float64 values per row of f/x
  type(c_ptr) :: s
  type(dds_options), target :: opts
  type(dds_var_info), target :: vi
  type(dds_store_info), target :: si
  type(dds_stats_info), target :: st
  integer :: rank, nproc, r, nchecks
  integer(c_int) :: rc
  integer(c_int64_t) :: nloc, total, first, i, k
  integer :: j
  integer(c_int64_t), target :: count, block_rows, gen
  integer(c_int64_t), allocatable, target :: rows(:), offsets(:), starts(:), counts(:)
  real(c_double), allocatable, target :: a(:, :), out(:, :)
  integer(c_int32_t), allocatable, target :: y(:, :), ybuf(:, :)
  integer(c_int64_t), target :: v(1), vbuf(1)
  character(kind=c_char), target :: namebuf(DDS_NAME_MAX + 1)
  character(len=:), allocatable :: msg

  nchecks = 0
  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, nproc)

  call check(dds_abi_version() == DDS_ABI_MAJOR, "ABI major")
  call check(len(dds_c_string(dds_version())) > 0, "version string")
  call dds_options_init(c_loc(opts))
  call check(opts%size == int(c_sizeof(opts), c_int32_t), "dds_options_init sets size")
  call check(opts%method == DDS_METHOD_DEFAULT, "default method")
  rc = dds_create(s, MPI_COMM_WORLD%MPI_VAL, c_loc(opts))
  call check(rc == DDS_OK, "dds_create")
  si%size = int(c_sizeof(si), c_int32_t)
  call check(dds_store_info_get(s, c_loc(si)) == DDS_OK, "dds_store_info_get")
  call check(si%rank == rank .and. si%comm_size == nproc .and. si%is_reader == 0, "store info")

  ! ---- dds_add: rank r holds r + 2 rows (rank 1 none); value = row*10 + column
  nloc = rows_of(rank)
  first = 0
  total = 0
  do r = 0, nproc - 1
    if (r < rank) first = first + rows_of(r)
    total = total + rows_of(r)
  end do
  allocate(a(W, max(nloc, 1_c_int64_t)))
  do i = 1, nloc
    do j = 1, W
      a(j, i) = value_of(first + i - 1, j)
    end do
  end do
  rc = dds_add(s, "f/x"//c_null_char, c_loc(a), nloc, int(W * 8, c_int64_t), DDS_DTYPE_FLOAT64)
  call check(rc == DDS_OK, "dds_add")

  vi%size = int(c_sizeof(vi), c_int32_t)
  call check(dds_query(s, "f/x"//c_null_char, c_loc(vi)) == DDS_OK, "dds_query")
  call check(vi%global_rows == total .and. vi%local_rows == nloc .and. vi%row_bytes == W * 8 &
             .and. vi%first_row == first .and. vi%dtype == DDS_DTYPE_FLOAT64 &
             .and. vi%group_size == nproc, "query fields")
  allocate(offsets(nproc + 1))
  call check(dds_var_offsets(s, "f/x"//c_null_char, c_loc(offsets), int(nproc + 1, c_int64_t)) == DDS_OK, &
             "dds_var_offsets")
  call check(offsets(rank + 1) == first .and. offsets(nproc + 1) == total, "offsets")

  ! ---- dds_get: every row, spanning all shards
  allocate(out(W, total))
  call check(dds_get(s, "f/x"//c_null_char, c_loc(out), 0_c_int64_t, total) == DDS_OK, "dds_get")
  do i = 1, total
    do j = 1, W
      call check(out(j, i) == value_of(i - 1, j), "dds_get row values")
    end do
  end do

  ! ---- dds_get_batch: rows in reverse order, with a repeat (collective for method 0)
  allocate(rows(total + 1))
  do i = 1, total
    rows(i) = total - i
  end do
  rows(total + 1) = 0
  deallocate(out)
  allocate(out(W, total + 1))
  call check(dds_get_batch(s, "f/x"//c_null_char, c_loc(out), c_loc(rows), total + 1) == DDS_OK, &
             "dds_get_batch")
  do i = 1, total + 1
    call check(all(out(:, i) == [(value_of(rows(i), j), j = 1, W)]), "dds_get_batch row values")
  end do

  ! ---- dds_get_ranges: the last row, then the first two
  allocate(starts(2), counts(2))
  starts = [total - 1, 0_c_int64_t]
  counts = [1_c_int64_t, min(2_c_int64_t, total)]
  call check(dds_get_ranges(s, "f/x"//c_null_char, c_loc(out), c_loc(starts), c_loc(counts), 2_c_int64_t) &
             == DDS_OK, "dds_get_ranges")
  call check(out(1, 1) == value_of(total - 1, 1) .and. out(2, 2) == value_of(0_c_int64_t, 2), "ranges values")

  ! ---- dds_init + dds_update + dds_sync: 3 int32 per row
  allocate(y(3, max(nloc, 1_c_int64_t)), ybuf(3, total))
  call check(dds_init(s, "f/y"//c_null_char, nloc, 12_c_int64_t, DDS_DTYPE_INT32) == DDS_OK, "dds_init")
  do i = 1, nloc
    y(:, i) = [int(first + i - 1, c_int32_t), int(rank, c_int32_t), -7_c_int32_t]
  end do
  call check(dds_update(s, "f/y"//c_null_char, c_loc(y), nloc, 0_c_int64_t) == DDS_OK, "dds_update")
  call check(dds_sync(s) == DDS_OK, "dds_sync")
  call check(dds_epoch_begin(s) == DDS_OK, "dds_epoch_begin")
  call check(dds_get(s, "f/y"//c_null_char, c_loc(ybuf), 0_c_int64_t, total) == DDS_OK, "dds_get f/y")
  call check(dds_epoch_end(s) == DDS_OK, "dds_epoch_end")
  do i = 1, total
    call check(ybuf(1, i) == i - 1 .and. ybuf(3, i) == -7, "updated rows")
  end do

  ! ---- bad input: a read outside the rows, on every rank, and its message
  rc = dds_get(s, "f/x"//c_null_char, c_loc(out), total, 1_c_int64_t)
  call check(rc == DDS_ERANGE, "read past the end gives DDS_ERANGE")
  msg = dds_last_error_string()
  call check(index(msg, "outside") > 0 .and. index(msg, "f/x") > 0, "message names the variable: "//msg)
  call check(dds_strerror_string(DDS_ERANGE) == "rows out of range", "dds_strerror")
  call check(dds_get(s, "nope"//c_null_char, c_loc(out), 0_c_int64_t, 1_c_int64_t) == DDS_ENOENT, "unknown name")
  ! a collective call with a bad argument fails on every rank
  rc = dds_add(s, "f/x"//c_null_char, c_loc(a), nloc, int(W * 8, c_int64_t), DDS_DTYPE_FLOAT64)
  call check(rc == DDS_EEXIST .or. rc == DDS_EPEER, "dds_add of an existing name")
  call check(index(dds_last_error_string(), "already exists") > 0, "message: "//dds_last_error_string())
  if (rank == nproc - 1) then
    rc = dds_init(s, "f/bad"//c_null_char, 1_c_int64_t, 0_c_int64_t, DDS_DTYPE_BYTES)
  else
    rc = dds_init(s, "f/bad"//c_null_char, 1_c_int64_t, 4_c_int64_t, DDS_DTYPE_BYTES)
  end if
  call check(rc /= DDS_OK, "a bad row size on one rank fails everywhere")
  call check(len(dds_last_error_string()) > 0, "message set")

  ! ---- a versioned variable: one counter per row
  call check(dds_init_versioned(s, "f/v"//c_null_char, nloc, 8_c_int64_t, DDS_DTYPE_INT64, 1_c_int64_t) &
             == DDS_OK, "dds_init_versioned")
  call check(dds_var_block_rows(s, "f/v"//c_null_char, c_loc(block_rows)) == DDS_OK .and. block_rows == 1, &
             "dds_var_block_rows")
  if (nloc > 0) then
    v(1) = 1000 + rank
    call check(dds_update(s, "f/v"//c_null_char, c_loc(v), 1_c_int64_t, 0_c_int64_t) == DDS_OK, &
               "dds_update of a versioned variable")
  end if
  call MPI_Barrier(MPI_COMM_WORLD)
  k = 0
  do r = 0, nproc - 1
    if (rows_of(r) > 0) then
      call check(dds_generation(s, "f/v"//c_null_char, k, c_loc(gen)) == DDS_OK .and. gen == 2, &
                 "generation after one update")
      call check(dds_get(s, "f/v"//c_null_char, c_loc(vbuf), k, 1_c_int64_t) == DDS_OK &
                 .and. vbuf(1) == 1000 + r, "versioned row")
    end if
    k = k + rows_of(r)
  end do
  call check(dds_generation(s, "f/x"//c_null_char, 0_c_int64_t, c_loc(gen)) == DDS_EINVAL, &
             "generation of a plain variable")

  ! ---- listing: the counters are hidden
  call check(dds_var_count(s, c_loc(count)) == DDS_OK .and. count == 3, "three variables listed")
  call check(dds_var_name(s, 2_c_int64_t, c_loc(namebuf), int(size(namebuf), c_size_t)) == DDS_OK, &
             "dds_var_name")
  call check(dds_c_string(c_loc(namebuf)) == "f/v", "third name is f/v")

  st%size = int(c_sizeof(st), c_int32_t)
  call check(dds_stats(s, c_loc(st)) == DDS_OK .and. st%read_calls > 0, "dds_stats")
  call check(dds_stats_reset(s) == DDS_OK, "dds_stats_reset")

  call check(dds_free(s) == DDS_OK, "dds_free")
  call check(dds_free(c_null_ptr) == DDS_OK, "dds_free(NULL)")
  if (rank == 0) print '(a, i0, a, i0, a)', "test_fortran: ", nproc, " ranks, ", nchecks, " checks passed"
  call MPI_Finalize()

contains

  pure function rows_of(r) result(n)
    integer, intent(in) :: r
    integer(c_int64_t) :: n
    n = merge(0_c_int64_t, int(r + 2, c_int64_t), r == 1)
  end function rows_of

  pure function value_of(row, col) result(x)
    integer(c_int64_t), intent(in) :: row
    integer, intent(in) :: col
    real(c_double) :: x
    x = real(row, c_double) * 10 + col
  end function value_of

  subroutine check(cond, what)
    logical, intent(in) :: cond
    character(len=*), intent(in) :: what
    nchecks = nchecks + 1
    if (.not. cond) then
      write (*, '(a, i0, a, a, a, a, a)') "rank ", rank, ": check failed: ", what, " [last error: ", &
        dds_last_error_string(), "]"
      call MPI_Abort(MPI_COMM_WORLD, 1)
    end if
  end subroutine check
end program test_fortran
