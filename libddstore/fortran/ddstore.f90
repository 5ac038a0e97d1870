! Fortran 2008 interface to libddstore (module `ddstore`), over the C ABI of
! ddstore.h through iso_c_binding. Every C function is bound under its own
! name with its own argument order, mapped literally:
!   dds_store **out            type(c_ptr)                 (by reference)
!   dds_store *, other T *     type(c_ptr), value          (pass c_loc(x), or c_null_ptr)
!   const char *name           character(kind=c_char) :: name(*)  (pass "x"//c_null_char)
!   int64_t rows, counts       integer(c_int64_t), value
!   int comm_f                 integer(c_int), value       (pass comm%MPI_VAL, mpi_f08)
!   uint32_t dtype             integer(c_int32_t), value
!   int n_core / size_t / double: integer(c_int) / integer(c_size_t) / real(c_double), value
! Fortran has no unsigned integers: uint32_t and uint64_t fields and values
! are integer(c_int32_t) and integer(c_int64_t) of the same bits. Return
! codes are integer(c_int): DDS_OK or a negative DDS_E* parameter below.
! The semantics (collective calls, thread safety, ownership) are those of
! ddstore.h; the constants are checked against it by
! tests/fortran/check_module.py (meson test), so they cannot drift.
module ddstore
  use, intrinsic :: iso_c_binding
  implicit none

  ! ---- constants (ddstore.h) -------------------------------------------------
  integer(c_int), parameter :: DDS_ABI_MAJOR = 1
  integer(c_int), parameter :: DDS_NAME_MAX = 255

  ! enum dds_error
  integer(c_int), parameter :: DDS_OK = 0
  integer(c_int), parameter :: DDS_EINVAL = -1
  integer(c_int), parameter :: DDS_ENOMEM = -2
  integer(c_int), parameter :: DDS_ENOENT = -3
  integer(c_int), parameter :: DDS_EEXIST = -4
  integer(c_int), parameter :: DDS_ERANGE = -5
  integer(c_int), parameter :: DDS_EMPI = -6
  integer(c_int), parameter :: DDS_EFABRIC = -7
  integer(c_int), parameter :: DDS_ENOTSUP = -8
  integer(c_int), parameter :: DDS_ESTATE = -9
  integer(c_int), parameter :: DDS_EPEER = -10
  integer(c_int), parameter :: DDS_ETIMEDOUT = -11
  integer(c_int), parameter :: DDS_EIO = -12
  integer(c_int), parameter :: DDS_EPROTO = -13
  integer(c_int), parameter :: DDS_EOVERFLOW = -14
  integer(c_int), parameter :: DDS_EMISMATCH = -15
  integer(c_int), parameter :: DDS_EAGAIN = -16

  ! enum dds_method
  integer(c_int32_t), parameter :: DDS_METHOD_DEFAULT = -1
  integer(c_int32_t), parameter :: DDS_METHOD_MPI = 0
  integer(c_int32_t), parameter :: DDS_METHOD_FABRIC = 1
  integer(c_int32_t), parameter :: DDS_METHOD_FILE = 2

  ! enum dds_dtype
  integer(c_int32_t), parameter :: DDS_DTYPE_BYTES = 0
  integer(c_int32_t), parameter :: DDS_DTYPE_BOOL = 1
  integer(c_int32_t), parameter :: DDS_DTYPE_UINT8 = 2
  integer(c_int32_t), parameter :: DDS_DTYPE_INT8 = 3
  integer(c_int32_t), parameter :: DDS_DTYPE_INT16 = 4
  integer(c_int32_t), parameter :: DDS_DTYPE_UINT16 = 5
  integer(c_int32_t), parameter :: DDS_DTYPE_INT32 = 6
  integer(c_int32_t), parameter :: DDS_DTYPE_UINT32 = 7
  integer(c_int32_t), parameter :: DDS_DTYPE_INT64 = 8
  integer(c_int32_t), parameter :: DDS_DTYPE_UINT64 = 9
  integer(c_int32_t), parameter :: DDS_DTYPE_FLOAT16 = 10
  integer(c_int32_t), parameter :: DDS_DTYPE_FLOAT32 = 11
  integer(c_int32_t), parameter :: DDS_DTYPE_FLOAT64 = 12
  integer(c_int32_t), parameter :: DDS_DTYPE_BFLOAT16 = 13

  ! ---- structs (size-field convention: set %size to c_sizeof(x), or call
  ! the matching *_init; the library reads and writes only %size bytes) ------

  type, bind(C) :: dds_options
    integer(c_int32_t) :: size = 0           ! uint32_t
    integer(c_int32_t) :: method = DDS_METHOD_DEFAULT
    integer(c_int32_t) :: width = 0
    type(c_ptr) :: fabric = c_null_ptr        ! const char *, NUL-terminated
    type(c_ptr) :: handshake_dir = c_null_ptr ! const char *, NUL-terminated
    type(c_ptr) :: nic_map = c_null_ptr       ! const char *, NUL-terminated (since ABI 1.2)
    type(c_ptr) :: storage_dir = c_null_ptr   ! const char *, NUL-terminated (since ABI 1.2)
  end type dds_options

  type, bind(C) :: dds_store_info
    integer(c_int32_t) :: size = 0
    integer(c_int32_t) :: method = 0
    integer(c_int32_t) :: rank = 0
    integer(c_int32_t) :: comm_size = 0
    integer(c_int32_t) :: group_rank = 0
    integer(c_int32_t) :: group_size = 0
    integer(c_int32_t) :: group_index = 0
    integer(c_int32_t) :: n_groups = 0
    integer(c_int32_t) :: is_reader = 0
    integer(c_int32_t) :: node_local = 0
    integer(c_int32_t) :: reads_collective = 0
    integer(c_int32_t) :: node_shm = 0
  end type dds_store_info

  type, bind(C) :: dds_var_info
    integer(c_int32_t) :: size = 0
    integer(c_int32_t) :: dtype = 0           ! uint32_t
    integer(c_int64_t) :: global_rows = 0
    integer(c_int64_t) :: local_rows = 0
    integer(c_int64_t) :: row_bytes = 0
    integer(c_int64_t) :: first_row = 0
    integer(c_int32_t) :: group_size = 0
  end type dds_var_info

  type, bind(C) :: dds_stats_info
    integer(c_int32_t) :: size = 0
    integer(c_int64_t) :: read_calls = 0      ! uint64_t
    integer(c_int64_t) :: rows_local = 0
    integer(c_int64_t) :: rows_remote = 0
    integer(c_int64_t) :: bytes_local = 0
    integer(c_int64_t) :: bytes_remote = 0
    real(c_double) :: read_seconds = 0
    integer(c_int64_t) :: gather_requests = 0   ! since ABI 1.2
    integer(c_int64_t) :: gather_bytes = 0
  end type dds_stats_info

  ! ---- functions (ddstore.h, in its order) ------------------------------------
  interface
    ! Library
    function dds_version() bind(C, name="dds_version")
      import :: c_ptr
      type(c_ptr) :: dds_version
    end function dds_version

    function dds_abi_version() bind(C, name="dds_abi_version")
      import :: c_int
      integer(c_int) :: dds_abi_version
    end function dds_abi_version

    function dds_strerror(code) bind(C, name="dds_strerror")
      import :: c_ptr, c_int
      integer(c_int), value :: code
      type(c_ptr) :: dds_strerror
    end function dds_strerror

    function dds_last_error() bind(C, name="dds_last_error")
      import :: c_ptr
      type(c_ptr) :: dds_last_error
    end function dds_last_error

    function dds_has_fabric() bind(C, name="dds_has_fabric")
      import :: c_int
      integer(c_int) :: dds_has_fabric
    end function dds_has_fabric

    ! Store
    subroutine dds_options_init(opts) bind(C, name="dds_options_init")
      import :: c_ptr
      type(c_ptr), value :: opts
    end subroutine dds_options_init

    function dds_create(out, comm_f, opts) bind(C, name="dds_create")
      import :: c_ptr, c_int
      type(c_ptr) :: out
      integer(c_int), value :: comm_f
      type(c_ptr), value :: opts
      integer(c_int) :: dds_create
    end function dds_create

    function dds_free(store) bind(C, name="dds_free")
      import :: c_ptr, c_int
      type(c_ptr), value :: store
      integer(c_int) :: dds_free
    end function dds_free

    function dds_store_info_get(store, info) bind(C, name="dds_store_info_get")
      import :: c_ptr, c_int
      type(c_ptr), value :: store, info
      integer(c_int) :: dds_store_info_get
    end function dds_store_info_get

    ! Variables
    function dds_add(store, name, data, nrows, row_bytes, dtype) bind(C, name="dds_add")
      import :: c_ptr, c_int, c_char, c_int64_t, c_int32_t
      type(c_ptr), value :: store
      character(kind=c_char) :: name(*)
      type(c_ptr), value :: data
      integer(c_int64_t), value :: nrows, row_bytes
      integer(c_int32_t), value :: dtype
      integer(c_int) :: dds_add
    end function dds_add

    function dds_init(store, name, nrows, row_bytes, dtype) bind(C, name="dds_init")
      import :: c_ptr, c_int, c_char, c_int64_t, c_int32_t
      type(c_ptr), value :: store
      character(kind=c_char) :: name(*)
      integer(c_int64_t), value :: nrows, row_bytes
      integer(c_int32_t), value :: dtype
      integer(c_int) :: dds_init
    end function dds_init

    function dds_update(store, name, data, nrows, offset) bind(C, name="dds_update")
      import :: c_ptr, c_int, c_char, c_int64_t
      type(c_ptr), value :: store
      character(kind=c_char) :: name(*)
      type(c_ptr), value :: data
      integer(c_int64_t), value :: nrows, offset
      integer(c_int) :: dds_update
    end function dds_update

    function dds_sync(store) bind(C, name="dds_sync")
      import :: c_ptr, c_int
      type(c_ptr), value :: store
      integer(c_int) :: dds_sync
    end function dds_sync

    function dds_get(store, name, out, start, nrows) bind(C, name="dds_get")
      import :: c_ptr, c_int, c_char, c_int64_t
      type(c_ptr), value :: store
      character(kind=c_char) :: name(*)
      type(c_ptr), value :: out
      integer(c_int64_t), value :: start, nrows
      integer(c_int) :: dds_get
    end function dds_get

    function dds_get_batch(store, name, out, rows, nrows) bind(C, name="dds_get_batch")
      import :: c_ptr, c_int, c_char, c_int64_t
      type(c_ptr), value :: store
      character(kind=c_char) :: name(*)
      type(c_ptr), value :: out, rows
      integer(c_int64_t), value :: nrows
      integer(c_int) :: dds_get_batch
    end function dds_get_batch

    function dds_get_ranges(store, name, out, starts, counts, nranges) bind(C, name="dds_get_ranges")
      import :: c_ptr, c_int, c_char, c_int64_t
      type(c_ptr), value :: store
      character(kind=c_char) :: name(*)
      type(c_ptr), value :: out, starts, counts
      integer(c_int64_t), value :: nranges
      integer(c_int) :: dds_get_ranges
    end function dds_get_ranges

    ! A rank that found its own read arguments bad joins the group's
    ! collective read with its code and message (DDSTORE_1.1).
    function dds_read_fail(store, code, message) bind(C, name="dds_read_fail")
      import :: c_ptr, c_int, c_char
      type(c_ptr), value :: store
      integer(c_int), value :: code
      character(kind=c_char) :: message(*)
      integer(c_int) :: dds_read_fail
    end function dds_read_fail

    function dds_epoch_begin(store) bind(C, name="dds_epoch_begin")
      import :: c_ptr, c_int
      type(c_ptr), value :: store
      integer(c_int) :: dds_epoch_begin
    end function dds_epoch_begin

    function dds_epoch_end(store) bind(C, name="dds_epoch_end")
      import :: c_ptr, c_int
      type(c_ptr), value :: store
      integer(c_int) :: dds_epoch_end
    end function dds_epoch_end

    function dds_query(store, name, info) bind(C, name="dds_query")
      import :: c_ptr, c_int, c_char
      type(c_ptr), value :: store
      character(kind=c_char) :: name(*)
      type(c_ptr), value :: info
      integer(c_int) :: dds_query
    end function dds_query

    function dds_var_offsets(store, name, offsets, n) bind(C, name="dds_var_offsets")
      import :: c_ptr, c_int, c_char, c_int64_t
      type(c_ptr), value :: store
      character(kind=c_char) :: name(*)
      type(c_ptr), value :: offsets
      integer(c_int64_t), value :: n
      integer(c_int) :: dds_var_offsets
    end function dds_var_offsets

    function dds_var_count(store, count) bind(C, name="dds_var_count")
      import :: c_ptr, c_int
      type(c_ptr), value :: store, count
      integer(c_int) :: dds_var_count
    end function dds_var_count

    function dds_var_name(store, index, buf, buflen) bind(C, name="dds_var_name")
      import :: c_ptr, c_int, c_int64_t, c_size_t
      type(c_ptr), value :: store
      integer(c_int64_t), value :: index
      type(c_ptr), value :: buf
      integer(c_size_t), value :: buflen
      integer(c_int) :: dds_var_name
    end function dds_var_name

    function dds_store_property(store, key, buf, buflen) bind(C, name="dds_store_property")
      import :: c_ptr, c_int, c_char, c_size_t
      type(c_ptr), value :: store
      character(kind=c_char) :: key(*)
      type(c_ptr), value :: buf
      integer(c_size_t), value :: buflen
      integer(c_int) :: dds_store_property
    end function dds_store_property

    ! File-backed stores (ABI 1.2)
    function dds_save(store) bind(C, name="dds_save")
      import :: c_ptr, c_int
      type(c_ptr), value :: store
      integer(c_int) :: dds_save
    end function dds_save

    function dds_open(out, comm_f, storage_dir, opts) bind(C, name="dds_open")
      import :: c_ptr, c_int, c_char
      type(c_ptr) :: out
      integer(c_int), value :: comm_f
      character(kind=c_char) :: storage_dir(*)
      type(c_ptr), value :: opts
      integer(c_int) :: dds_open
    end function dds_open

    function dds_verify_saved(store, bad_blocks) bind(C, name="dds_verify_saved")
      import :: c_ptr, c_int, c_int64_t
      type(c_ptr), value :: store
      integer(c_int64_t) :: bad_blocks
      integer(c_int) :: dds_verify_saved
    end function dds_verify_saved

    ! Receive buffers (methods 1 and 2)
    function dds_register_recv(store, buf, len) bind(C, name="dds_register_recv")
      import :: c_ptr, c_int, c_size_t
      type(c_ptr), value :: store, buf
      integer(c_size_t), value :: len
      integer(c_int) :: dds_register_recv
    end function dds_register_recv

    function dds_unregister_recv(store, buf) bind(C, name="dds_unregister_recv")
      import :: c_ptr, c_int
      type(c_ptr), value :: store, buf
      integer(c_int) :: dds_unregister_recv
    end function dds_unregister_recv

    ! Method 2 readers
    function dds_join(out, handshake_dir, n_core, timeout_s) bind(C, name="dds_join")
      import :: c_ptr, c_int, c_double
      type(c_ptr) :: out
      type(c_ptr), value :: handshake_dir
      integer(c_int), value :: n_core
      real(c_double), value :: timeout_s
      integer(c_int) :: dds_join
    end function dds_join

    function dds_attach(store, name) bind(C, name="dds_attach")
      import :: c_ptr, c_int, c_char
      type(c_ptr), value :: store
      character(kind=c_char) :: name(*)
      integer(c_int) :: dds_attach
    end function dds_attach

    ! Versioned variables
    function dds_init_versioned(store, name, nrows, row_bytes, dtype, block_rows) &
        bind(C, name="dds_init_versioned")
      import :: c_ptr, c_int, c_char, c_int64_t, c_int32_t
      type(c_ptr), value :: store
      character(kind=c_char) :: name(*)
      integer(c_int64_t), value :: nrows, row_bytes
      integer(c_int32_t), value :: dtype
      integer(c_int64_t), value :: block_rows
      integer(c_int) :: dds_init_versioned
    end function dds_init_versioned

    function dds_var_block_rows(store, name, block_rows) bind(C, name="dds_var_block_rows")
      import :: c_ptr, c_int, c_char
      type(c_ptr), value :: store
      character(kind=c_char) :: name(*)
      type(c_ptr), value :: block_rows
      integer(c_int) :: dds_var_block_rows
    end function dds_var_block_rows

    function dds_generation(store, name, row, gen) bind(C, name="dds_generation")
      import :: c_ptr, c_int, c_char, c_int64_t
      type(c_ptr), value :: store
      character(kind=c_char) :: name(*)
      integer(c_int64_t), value :: row
      type(c_ptr), value :: gen
      integer(c_int) :: dds_generation
    end function dds_generation

    ! Counters
    function dds_stats(store, info) bind(C, name="dds_stats")
      import :: c_ptr, c_int
      type(c_ptr), value :: store, info
      integer(c_int) :: dds_stats
    end function dds_stats

    function dds_stats_reset(store) bind(C, name="dds_stats_reset")
      import :: c_ptr, c_int
      type(c_ptr), value :: store
      integer(c_int) :: dds_stats_reset
    end function dds_stats_reset
  end interface

  ! Not part of the C ABI: the C library's strlen, for dds_c_string.
  interface
    function c_strlen(s) bind(C, name="strlen")
      import :: c_ptr, c_size_t
      type(c_ptr), value :: s
      integer(c_size_t) :: c_strlen
    end function c_strlen
  end interface

contains

  ! A NUL-terminated C string (e.g. from dds_version or dds_strerror) as a
  ! Fortran string; "" for c_null_ptr. The C string is not freed (the
  ! library's strings are static or per thread).
  function dds_c_string(p) result(s)
    type(c_ptr), intent(in) :: p
    character(len=:), allocatable :: s
    character(kind=c_char), pointer :: chars(:)
    integer(c_size_t) :: n, i
    if (.not. c_associated(p)) then
      s = ""
      return
    end if
    n = c_strlen(p)
    call c_f_pointer(p, chars, [n])
    allocate(character(len=n) :: s)
    do i = 1, n
      s(i:i) = chars(i)
    end do
  end function dds_c_string

  ! dds_last_error() (the calling thread's message about the last error) as
  ! a Fortran string.
  function dds_last_error_string() result(s)
    character(len=:), allocatable :: s
    s = dds_c_string(dds_last_error())
  end function dds_last_error_string

  ! dds_strerror(code) (static text of an error code) as a Fortran string.
  function dds_strerror_string(code) result(s)
    integer(c_int), intent(in) :: code
    character(len=:), allocatable :: s
    s = dds_c_string(dds_strerror(code))
  end function dds_strerror_string
end module ddstore
