//! Shared libraries opened at run time rather than linked: libtorch's CUDA library
//! ([`crate::device`]), the CUDA graph library ([`crate::cuda_graph`]) and NCCL — each only
//! when asked for, and never closed (what they register, and graphs, point into them).

use std::ffi::{CStr, CString, c_void};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Whether a library's symbols resolve those of libraries opened after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// `RTLD_GLOBAL`: libtorch's CUDA library, which later libraries link against.
    Global,
    /// `RTLD_LOCAL`: a library whose functions are looked up by [`symbol`] only.
    Local,
}

/// An open library.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Library(*mut c_void);

// SAFETY: a dlopen handle may be used from any thread.
unsafe impl Send for Library {}
unsafe impl Sync for Library {}

/// Opens `path` (a file, or a name the dynamic loader searches for); `Err` holds the loader's
/// reason.
pub(crate) fn open(path: &Path, scope: Scope) -> Result<Library, String> {
    let name = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| format!("{}: a path with a NUL byte", path.display()))?;
    let flags = libc::RTLD_NOW
        | match scope {
            Scope::Global => libc::RTLD_GLOBAL,
            Scope::Local => libc::RTLD_LOCAL,
        };
    // SAFETY: `name` is a valid C string. The libraries opened here (libtorch's, NCCL, the
    // graph library) only register their own back ends in their initialisers.
    let handle = unsafe { libc::dlopen(name.as_ptr(), flags) };
    if handle.is_null() {
        return Err(last_error());
    }
    Ok(Library(handle))
}

/// The function `name` of `library`, as the function pointer type `F`; `Err` holds the
/// loader's reason.
///
/// # Safety
/// `F` is the function pointer type of `name`'s C signature.
pub(crate) unsafe fn symbol<F: Copy>(library: Library, name: &str) -> Result<F, String> {
    assert_eq!(
        size_of::<F>(),
        size_of::<*mut c_void>(),
        "a function pointer"
    );
    let c_name = CString::new(name).map_err(|_| format!("{name}: a NUL byte"))?;
    // SAFETY: a handle dlopen returned, a valid C string.
    let address = unsafe { libc::dlsym(library.0, c_name.as_ptr()) };
    if address.is_null() {
        return Err(last_error());
    }
    // SAFETY: the caller vouches for the type; the sizes agree.
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&address) })
}

/// The reason the last dl* call on this thread failed (read at once after it).
fn last_error() -> String {
    // SAFETY: dlerror returns null or a C string valid until the next dl* call on this thread.
    unsafe {
        let why = libc::dlerror();
        if why.is_null() {
            "unknown reason".into()
        } else {
            CStr::from_ptr(why).to_string_lossy().into_owned()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_library_that_is_not_there_says_why() {
        let why = open(Path::new("/nonexistent/libnothing.so"), Scope::Local).unwrap_err();
        assert!(why.contains("/nonexistent/libnothing.so"), "{why}");
    }

    #[test]
    fn functions_are_found_by_name_or_refused() {
        // libc is in every process.
        let libc = open(Path::new("libc.so.6"), Scope::Local).unwrap();
        // SAFETY: strlen's C signature.
        let strlen: unsafe extern "C" fn(*const std::ffi::c_char) -> usize =
            unsafe { symbol(libc, "strlen") }.unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { strlen(c"four".as_ptr()) }, 4);
        // SAFETY: never called.
        let missing = unsafe { symbol::<unsafe extern "C" fn()>(libc, "rlc_no_such_function") };
        assert!(missing.unwrap_err().contains("rlc_no_such_function"));
    }
}
