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
! ddstore.h. The constants, types and interfaces are generated from it
! (gen_c_api.py, into the build directory), and the module as built is
! checked against it by tests/fortran/check_module.py (meson test), so none
! of it can drift; what is written here is the helpers below.
module ddstore
  use, intrinsic :: iso_c_binding
  implicit none

  ! Constants, the structs as bind(C) derived types (members in the C order;
  ! size-field convention: set %size to c_sizeof(x), or call the matching
  ! *_init; the library reads and writes only %size bytes) and the bind(C)
  ! interface of every function, generated from ddstore.h at build time
  ! (gen_c_api.py, by the mapping above).
  include "ddstore_c_api.inc"

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
