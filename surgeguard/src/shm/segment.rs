//! The mapping: a header, a process table and one placeable object, in a file under
//! `/dev/shm` (or any path), or in an anonymous `MAP_SHARED` mapping inherited by `fork`.
//!
//! **Create-or-attach by name is race-free.** A creator builds the whole segment in an
//! unnamed file (`O_TMPFILE` in the target directory), then links it into place with
//! `linkat`, which fails if the name exists: so a name only ever refers to a fully
//! initialised segment, N processes starting at once agree on one segment (the losers
//! open the winner's), and a creator that dies mid-initialisation leaves nothing behind
//! (its unnamed file goes with its last descriptor). Where `O_TMPFILE` is unsupported, a
//! uniquely named temporary file and `link` give the same guarantee.
//!
//! **No references over shared bytes** except to atomics and to the placed object (whose
//! plain fields are written once, before the segment is linked or the child forked).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::ShmError;
use super::table::ProcSlot;

/// `b"SGSHM\0\0\x01"` as a little-endian word: what every segment starts with.
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"SGSHM\0\0\x01");
/// Bumped when the header or table layout changes.
pub(crate) const SEGMENT_VERSION: u64 = 1;
/// `init` once the segment is complete.
const READY: u64 = 2;

/// The segment header: all atomics, so that a reference to it is sound while any process
/// writes any word. Every word but `next_sweep` is written once, before publication.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub(crate) struct Header {
    pub(crate) magic: AtomicU64,
    pub(crate) version: AtomicU64,
    /// What object follows ([`super::Kind`] code).
    pub(crate) kind: AtomicU64,
    /// The object's `Placeable::LAYOUT`.
    pub(crate) layout: AtomicU64,
    /// Hash of the crate version that built the segment.
    pub(crate) build: AtomicU64,
    /// Hash of the object's config.
    pub(crate) config: AtomicU64,
    /// Hash of `/proc/sys/kernel/random/boot_id`: `CLOCK_MONOTONIC` counts from boot.
    pub(crate) boot: AtomicU64,
    /// The pid namespace's inode: pids in the table mean something only there.
    pub(crate) pid_namespace: AtomicU64,
    /// `CLOCK_MONOTONIC` ns when it was created (the clock epoch every `now` shares).
    pub(crate) created_at: AtomicU64,
    /// A random number naming this segment (permits of another segment are refused).
    pub(crate) nonce: AtomicU64,
    /// Process table slots.
    pub(crate) table_len: AtomicU64,
    /// Byte offset of the object.
    pub(crate) object_offset: AtomicU64,
    /// Total bytes.
    pub(crate) total_len: AtomicU64,
    /// Earliest `now` of the next reclaim sweep triggered by a refusal.
    pub(crate) next_sweep: AtomicU64,
    /// [`READY`] once everything above and the object are written (Release).
    pub(crate) init: AtomicU64,
}

const HEADER_LEN: usize = size_of::<Header>();
const _: () = assert!(HEADER_LEN == 128 && HEADER_LEN % 64 == 0);

/// What a segment holds, as laid out by [`Mapping::create`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shape {
    pub(crate) kind: u64,
    pub(crate) layout: u64,
    pub(crate) config: u64,
    pub(crate) table_len: usize,
    pub(crate) object_size: usize,
    pub(crate) object_align: usize,
}

impl Shape {
    fn object_offset(&self) -> usize {
        let end = HEADER_LEN + self.table_len * size_of::<ProcSlot>();
        end.next_multiple_of(self.object_align.max(128))
    }
    fn total_len(&self) -> usize {
        (self.object_offset() + self.object_size).next_multiple_of(4096)
    }
}

/// One mapping of a segment into this process.
#[derive(Debug)]
pub(crate) struct Mapping {
    base: *mut u8,
    len: usize,
    /// Where it is linked (file-backed), for `unlink`.
    pub(crate) path: Option<PathBuf>,
}

// SAFETY: the mapping is only reached through `&Header`, `&[ProcSlot]` and `&T` with
// `T: Placeable` (atomics and write-once fields), which are `Sync`; the pointer itself is
// never written after construction.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` came from a successful mmap and are unmapped once; nothing
        // borrowed from the mapping outlives `self` (every accessor borrows `&self`).
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

fn os_err(what: &'static str) -> ShmError {
    ShmError::Os { what, errno: std::io::Error::last_os_error().raw_os_error().unwrap_or(0) }
}

/// A pointer to fresh zeroed shared memory of `len` bytes mapped from `fd` (or anonymous).
fn map(fd: Option<libc::c_int>, len: usize) -> Result<*mut u8, ShmError> {
    let (flags, fd) = match fd {
        Some(fd) => (libc::MAP_SHARED, fd),
        None => (libc::MAP_SHARED | libc::MAP_ANONYMOUS, -1),
    };
    // SAFETY: a fresh mapping (null hint) of `len` bytes; the kernel checks `fd`.
    let p = unsafe {
        libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, flags, fd, 0)
    };
    if p == libc::MAP_FAILED {
        return Err(os_err("mmap"));
    }
    Ok(p.cast())
}

/// A file descriptor closed on drop.
struct Fd(libc::c_int);
impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: an fd this struct owns, closed once.
        unsafe { libc::close(self.0) };
    }
}

fn cstr(path: &Path) -> Result<CString, ShmError> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| ShmError::BadName)
}

impl Mapping {
    pub(crate) fn header(&self) -> &Header {
        // SAFETY: every mapping is at least HEADER_LEN bytes, page-aligned (so aligned for
        // Header), and Header is all atomics: a shared reference is sound whoever writes.
        unsafe { &*self.base.cast::<Header>() }
    }

    pub(crate) fn table(&self) -> &[ProcSlot] {
        let h = self.header();
        let n = h.table_len.load(Ordering::Relaxed) as usize;
        // SAFETY: attach checked that HEADER_LEN + n slots fit in the mapping; ProcSlot is
        // atomics only (64-aligned: HEADER_LEN is a multiple of 64).
        unsafe { std::slice::from_raw_parts(self.base.add(HEADER_LEN).cast::<ProcSlot>(), n) }
    }

    /// The placed object.
    ///
    /// # Safety
    /// `T` must be the type the segment was created with (checked on attach through
    /// `kind` and `layout`).
    pub(crate) unsafe fn object<T>(&self) -> &T {
        let off = self.header().object_offset.load(Ordering::Relaxed) as usize;
        // SAFETY: attach checked the offset, alignment and size; the caller the type.
        unsafe { &*self.base.add(off).cast::<T>() }
    }

    /// Builds a segment in fresh memory: header, zeroed table, `object` moved in, then
    /// `init = READY` (Release).
    fn init<T>(base: *mut u8, shape: &Shape, object: T) {
        // SAFETY: `base` is a fresh zeroed mapping of `shape.total_len()` bytes nobody else
        // can reach yet (unnamed file or anonymous memory before fork); the object offset
        // is aligned for T and T fits (Shape's arithmetic).
        unsafe { base.add(shape.object_offset()).cast::<T>().write(object) };
        // SAFETY: as in `header()`.
        let h = unsafe { &*base.cast::<Header>() };
        h.magic.store(MAGIC, Ordering::Relaxed);
        h.version.store(SEGMENT_VERSION, Ordering::Relaxed);
        h.kind.store(shape.kind, Ordering::Relaxed);
        h.layout.store(shape.layout, Ordering::Relaxed);
        h.build.store(super::build_hash(), Ordering::Relaxed);
        h.config.store(shape.config, Ordering::Relaxed);
        h.boot.store(super::liveness::boot_id(), Ordering::Relaxed);
        h.pid_namespace.store(super::liveness::pid_namespace(), Ordering::Relaxed);
        h.created_at.store(crate::clock::monotonic_ns(), Ordering::Relaxed);
        h.nonce.store(super::random_nonce(), Ordering::Relaxed);
        h.table_len.store(shape.table_len as u64, Ordering::Relaxed);
        h.object_offset.store(shape.object_offset() as u64, Ordering::Relaxed);
        h.total_len.store(shape.total_len() as u64, Ordering::Relaxed);
        // Release: publishes every store above and the object to the attachers' Acquire
        // load of `init` (and to a forked child, which starts after it anyway).
        h.init.store(READY, Ordering::Release);
    }

    /// An anonymous `MAP_SHARED` segment, shared with children forked after this call.
    pub(crate) fn anonymous<T>(shape: &Shape, object: T) -> Result<Self, ShmError> {
        let len = shape.total_len();
        let base = map(None, len)?;
        Self::init(base, shape, object);
        Ok(Self { base, len, path: None })
    }

    /// Opens the segment at `path`, or creates it with `make()` if there is none.
    pub(crate) fn open_or_create<T>(
        path: &Path,
        shape: &Shape,
        make: impl Fn() -> Result<T, ShmError>,
    ) -> Result<(Self, bool), ShmError> {
        let c = cstr(path)?;
        for _ in 0..100 {
            // SAFETY: a valid C string; the kernel checks the rest.
            let fd = unsafe {
                libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC | libc::O_NOFOLLOW)
            };
            if fd >= 0 {
                let fd = Fd(fd);
                return Ok((Self::attach(fd, path, shape)?, false));
            }
            if std::io::Error::last_os_error().raw_os_error() != Some(libc::ENOENT) {
                return Err(os_err("open"));
            }
            match Self::create(path, &c, shape, make()?) {
                Ok(m) => return Ok((m, true)),
                // Another process linked its segment first: open that one.
                Err(ShmError::Os { errno: libc::EEXIST, .. }) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(ShmError::Os { what: "open (the name keeps appearing and vanishing)", errno: 0 })
    }

    /// Builds the segment unnamed, then links it at `path` (EEXIST if taken).
    fn create<T>(path: &Path, c: &CString, shape: &Shape, object: T) -> Result<Self, ShmError> {
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let dir_c = cstr(dir)?;
        let len = shape.total_len();
        // SAFETY: a valid C string; O_TMPFILE makes an unnamed regular file in `dir`.
        let raw = unsafe {
            libc::open(dir_c.as_ptr(), libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC, 0o600)
        };
        let (fd, temp_name) = if raw >= 0 {
            (Fd(raw), None)
        } else {
            // No O_TMPFILE here: a unique temporary name, linked then unlinked.
            let name =
                dir.join(format!(".sgshm-{}-{:016x}", std::process::id(), super::random_nonce()));
            let nc = cstr(&name)?;
            // SAFETY: a valid C string.
            let raw = unsafe {
                libc::open(
                    nc.as_ptr(),
                    libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_CLOEXEC,
                    0o600,
                )
            };
            if raw < 0 {
                return Err(os_err("open (temporary segment file)"));
            }
            (Fd(raw), Some(nc))
        };
        let cleanup = |name: &Option<CString>| {
            if let Some(n) = name {
                // SAFETY: a valid C string naming our own temporary file.
                unsafe { libc::unlink(n.as_ptr()) };
            }
        };
        // SAFETY: an fd we own; the length fits off_t.
        if unsafe { libc::ftruncate(fd.0, len as libc::off_t) } != 0 {
            cleanup(&temp_name);
            return Err(os_err("ftruncate"));
        }
        let base = match map(Some(fd.0), len) {
            Ok(b) => b,
            Err(e) => {
                cleanup(&temp_name);
                return Err(e);
            }
        };
        Self::init(base, shape, object);
        let mapping = Self { base, len, path: Some(path.to_path_buf()) };
        let rc = match &temp_name {
            None => {
                let proc_path = CString::new(format!("/proc/self/fd/{}", fd.0)).expect("no NUL");
                // SAFETY: valid C strings; AT_SYMLINK_FOLLOW links the file the fd names.
                unsafe {
                    libc::linkat(
                        libc::AT_FDCWD,
                        proc_path.as_ptr(),
                        libc::AT_FDCWD,
                        c.as_ptr(),
                        libc::AT_SYMLINK_FOLLOW,
                    )
                }
            }
            // SAFETY: valid C strings.
            Some(n) => unsafe { libc::link(n.as_ptr(), c.as_ptr()) },
        };
        let err = (rc != 0).then(|| os_err("link"));
        cleanup(&temp_name);
        match err {
            Some(e) => Err(e), // `mapping` drops: unmapped, and the unnamed file goes with `fd`
            None => Ok(mapping),
        }
    }

    /// Maps an existing segment and checks that it is one this build can use.
    fn attach(fd: Fd, path: &Path, shape: &Shape) -> Result<Self, ShmError> {
        // SAFETY: a zeroed stat buffer and an fd we own.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::fstat(fd.0, &mut st) } != 0 {
            return Err(os_err("fstat"));
        }
        let len = st.st_size as usize;
        if len < HEADER_LEN {
            return Err(ShmError::NotASegment);
        }
        let base = map(Some(fd.0), len)?;
        let m = Self { base, len, path: Some(path.to_path_buf()) };
        let h = m.header();
        // Acquire: pairs with the Release store in `init`.
        if h.init.load(Ordering::Acquire) != READY || h.magic.load(Ordering::Relaxed) != MAGIC {
            return Err(ShmError::NotASegment);
        }
        if h.version.load(Ordering::Relaxed) != SEGMENT_VERSION
            || h.build.load(Ordering::Relaxed) != super::build_hash()
        {
            return Err(ShmError::VersionMismatch);
        }
        if h.kind.load(Ordering::Relaxed) != shape.kind {
            return Err(ShmError::KindMismatch);
        }
        if h.layout.load(Ordering::Relaxed) != shape.layout {
            return Err(ShmError::LayoutMismatch);
        }
        if h.config.load(Ordering::Relaxed) != shape.config {
            return Err(ShmError::ConfigMismatch);
        }
        if h.boot.load(Ordering::Relaxed) != super::liveness::boot_id() {
            return Err(ShmError::OtherBoot);
        }
        if h.pid_namespace.load(Ordering::Relaxed) != super::liveness::pid_namespace() {
            return Err(ShmError::OtherPidNamespace);
        }
        let table_len = h.table_len.load(Ordering::Relaxed) as usize;
        let off = h.object_offset.load(Ordering::Relaxed) as usize;
        if table_len != shape.table_len
            || off != shape.object_offset()
            || h.total_len.load(Ordering::Relaxed) as usize != len
            || off + shape.object_size > len
        {
            return Err(ShmError::LayoutMismatch);
        }
        Ok(m)
    }
}

/// Removes the name (mapped processes keep their segment; the next attach by this name
/// creates a new one).
pub(crate) fn unlink(path: &Path) -> Result<(), ShmError> {
    let c = cstr(path)?;
    // SAFETY: a valid C string.
    if unsafe { libc::unlink(c.as_ptr()) } != 0 {
        return Err(os_err("unlink"));
    }
    Ok(())
}
