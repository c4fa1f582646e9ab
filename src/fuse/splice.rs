//! Read replies spliced from a chunk file into the kernel.
//!
//! The bytes of an uncompressed chunk go from the file's page cache through a pipe into the
//! reply: the pipe only holds references to the file's pages, and the kernel copies them once,
//! into the reader's pages. Reading them into a buffer and writing that costs one copy more
//! per byte, the larger part of what a sequential read of uncompressed data costs the daemon
//! (see bench/RESULTS.md).

use std::cell::RefCell;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// What became of a spliced reply.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Spliced {
    /// The kernel took the reply.
    Sent,
    /// The kernel no longer waits for this reply (the request was interrupted): the request
    /// needs no other.
    Gone,
    /// Nothing was sent: the request must still be answered, the usual way.
    NotSent,
    /// The device refused the reply (a kernel that takes no spliced writes): the request must
    /// still be answered, and later ones had better not be spliced.
    Refused(io::ErrorKind),
}

/// Where a spliced reply failed.
enum Failure {
    /// Filling the pipe from the files.
    Pipe(io::Error),
    /// Moving it to the device.
    Device(io::Error),
}

/// `struct fuse_out_header`: the reply's length, its error (0) and the request's id.
const HEADER_LEN: usize = 16;

/// A pipe with room for a number of page-sized buffers.
struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    slots: usize,
}

thread_local! {
    /// A session thread's pipe, kept from reply to reply (empty between them).
    static PIPE: RefCell<Option<Pipe>> = const { RefCell::new(None) };
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).unwrap_or(4096)
}

/// `Err` with the last OS error if `ret` is negative, else `ret`.
fn check(ret: isize) -> io::Result<usize> {
    usize::try_from(ret).map_err(|_| io::Error::last_os_error())
}

impl Pipe {
    fn new() -> io::Result<Pipe> {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 writes.
        check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } as isize)?;
        // SAFETY: pipe2 succeeded, so both are open descriptors that nothing else owns.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: F_GETPIPE_SZ on an open pipe.
        let bytes = check(unsafe { libc::fcntl(write.as_raw_fd(), libc::F_GETPIPE_SZ) } as isize)?;
        Ok(Pipe {
            read,
            write,
            slots: bytes / page_size(),
        })
    }

    /// Grows the pipe to at least `slots` buffers; false where that is not permitted (above
    /// `/proc/sys/fs/pipe-max-size` without `CAP_SYS_RESOURCE`).
    fn reserve(&mut self, slots: usize) -> bool {
        if self.slots >= slots {
            return true;
        }
        let Ok(bytes) = i32::try_from(slots * page_size()) else {
            return false;
        };
        // SAFETY: F_SETPIPE_SZ on an open pipe; the kernel rounds the size up.
        match check(
            unsafe { libc::fcntl(self.write.as_raw_fd(), libc::F_SETPIPE_SZ, bytes) } as isize,
        ) {
            Ok(bytes) => {
                self.slots = bytes / page_size();
                self.slots >= slots
            }
            Err(_) => false,
        }
    }
}

/// The largest read request the kernel sends by default (`max_pages` of 256 pages).
const LARGEST_REQUEST: usize = 1 << 20;

/// The most bytes a spliced reply can carry here when that is less than the kernel's largest
/// read request, `None` when it is not. A pipe may grow to `/proc/sys/fs/pipe-max-size` (1 MiB
/// by default) without `CAP_SYS_RESOURCE`, and one page of it goes to the header, so 1 MiB
/// requests would never fit: the mount then asks the kernel for requests of this size.
pub(super) fn reply_limit() -> Option<usize> {
    let page = page_size();
    let mut pipe = Pipe::new().ok()?;
    if pipe.reserve(LARGEST_REQUEST / page + 1) {
        return None;
    }
    let max = std::fs::read_to_string("/proc/sys/fs/pipe-max-size")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .unwrap_or(0);
    pipe.reserve(max / page);
    Some(pipe.slots.saturating_sub(1) * page)
}

/// Bytes of a file that a reply carries.
#[derive(Debug)]
pub(super) struct Piece<'a> {
    /// The file, which must hold the bytes.
    pub file: &'a File,
    /// Where they start.
    pub offset: u64,
    /// How many.
    pub len: usize,
}

/// Answers the read request `unique` on the FUSE device `device` with the bytes of `pieces`,
/// one after the other (a file that turns out shorter than its piece sends nothing).
///
/// The pipe takes one buffer per page each piece touches plus one for the header, so a
/// request is only spliced if the pipe may grow that large; otherwise, or on any failure
/// before the kernel took the reply, the result is [`Spliced::NotSent`] and the pipe, which
/// may still hold some bytes, is dropped for a new one.
pub(super) fn reply_from_files(
    device: BorrowedFd<'_>,
    unique: u64,
    pieces: &[Piece<'_>],
) -> Spliced {
    PIPE.with(|cell| {
        let mut kept = cell.borrow_mut();
        if kept.is_none() {
            match Pipe::new() {
                Ok(pipe) => *kept = Some(pipe),
                Err(e) => {
                    log::debug!("no pipe for spliced replies: {e}");
                    return Spliced::NotSent;
                }
            }
        }
        let Some(pipe) = kept.as_mut() else {
            return Spliced::NotSent;
        };
        let page = page_size();
        let pages: usize = pieces
            .iter()
            .map(|p| (p.offset as usize % page + p.len).div_ceil(page))
            .sum();
        if !pipe.reserve(pages + 1) {
            return Spliced::NotSent;
        }
        let result = send(pipe, device, unique, pieces);
        if result.is_err() {
            *kept = None;
        }
        match result {
            Ok(()) => Spliced::Sent,
            Err(Failure::Device(e)) if e.raw_os_error() == Some(libc::ENOENT) => Spliced::Gone,
            Err(Failure::Device(e)) => {
                log::debug!("spliced reply refused: {e}");
                Spliced::Refused(e.kind())
            }
            Err(Failure::Pipe(e)) => {
                log::debug!("spliced reply not sent: {e}");
                Spliced::NotSent
            }
        }
    })
}

/// Fills the (empty) pipe with the reply's header and the pieces' bytes, then moves it all to
/// the device in one write, as the device wants a reply.
fn send(
    pipe: &Pipe,
    device: BorrowedFd<'_>,
    unique: u64,
    pieces: &[Piece<'_>],
) -> Result<(), Failure> {
    fill_pipe(pipe, unique, pieces).map_err(Failure::Pipe)?;
    let total = HEADER_LEN + pieces.iter().map(|p| p.len).sum::<usize>();
    loop {
        // SAFETY: moves `total` bytes from an open pipe, which holds exactly those, to the
        // open FUSE device; the device takes a reply whole or not at all.
        let n = unsafe {
            libc::splice(
                pipe.read.as_raw_fd(),
                std::ptr::null_mut(),
                device.as_raw_fd(),
                std::ptr::null_mut(),
                total,
                0,
            )
        };
        match check(n) {
            Ok(n) if n == total => return Ok(()),
            Ok(_) => return Err(Failure::Device(io::ErrorKind::WriteZero.into())),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Failure::Device(e)),
        }
    }
}

/// Puts the reply's header and the pieces' bytes into the (empty) pipe.
fn fill_pipe(pipe: &Pipe, unique: u64, pieces: &[Piece<'_>]) -> io::Result<()> {
    let total = HEADER_LEN + pieces.iter().map(|p| p.len).sum::<usize>();
    let total_u32 = u32::try_from(total).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    let mut header = [0u8; HEADER_LEN];
    header[..4].copy_from_slice(&total_u32.to_ne_bytes());
    header[8..].copy_from_slice(&unique.to_ne_bytes());
    // SAFETY: writes the `HEADER_LEN` bytes of `header` to an open pipe.
    let n =
        check(unsafe { libc::write(pipe.write.as_raw_fd(), header.as_ptr().cast(), HEADER_LEN) })?;
    if n != HEADER_LEN {
        return Err(io::Error::from(io::ErrorKind::WriteZero));
    }
    for piece in pieces {
        fill(pipe, piece)?;
    }
    Ok(())
}

/// Splices the bytes of `piece` into the pipe, which has room for them.
fn fill(pipe: &Pipe, piece: &Piece<'_>) -> io::Result<()> {
    let mut at = libc::loff_t::try_from(piece.offset)
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut moved = 0;
    while moved < piece.len {
        // SAFETY: splices from an open file at `at` (updated by the call) into an open pipe
        // that has room for every page (`reserve`); NONBLOCK so a full pipe is an error, not a
        // wait for a reader that is this very thread.
        let n = unsafe {
            libc::splice(
                piece.file.as_raw_fd(),
                &mut at,
                pipe.write.as_raw_fd(),
                std::ptr::null_mut(),
                piece.len - moved,
                libc::SPLICE_F_NONBLOCK,
            )
        };
        match check(n) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
            Ok(n) => moved += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsFd;

    fn file_of(bytes: &[u8]) -> File {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(bytes).unwrap();
        file
    }

    /// A pipe standing in for the FUSE device: what is sent, and where to read it.
    fn device() -> (File, OwnedFd) {
        let mut fds = [0; 2];
        // SAFETY: room for two descriptors.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: both were just opened, and nothing else owns them.
        unsafe { (File::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
    }

    /// Everything sent to `tx` (which is closed).
    fn received(rx: File, tx: OwnedFd) -> Vec<u8> {
        drop(tx);
        let mut got = Vec::new();
        (&rx).read_to_end(&mut got).unwrap();
        got
    }

    /// The header the FUSE protocol wants (length, no error, the request's id), then the
    /// pieces' bytes in order, whatever their alignment to pages, in one reply.
    #[test]
    fn sends_header_and_the_pieces_bytes() {
        let one: Vec<u8> = (0..3 * 4096 + 100).map(|i| (i * 7 % 251) as u8).collect();
        let two: Vec<u8> = (0..9000).map(|i| (i * 13 % 241) as u8).collect();
        let (f1, f2) = (file_of(&one), file_of(&two));
        let (rx, tx) = device();
        let pieces = [
            Piece {
                file: &f1,
                offset: 4000,
                len: 5000,
            },
            Piece {
                file: &f2,
                offset: 0,
                len: 4096,
            },
            Piece {
                file: &f1,
                offset: 1,
                len: 2,
            },
        ];
        assert_eq!(reply_from_files(tx.as_fd(), 0xfeed, &pieces), Spliced::Sent);
        let got = received(rx, tx);
        let want: Vec<u8> = [&one[4000..9000], &two[..4096], &one[1..3]].concat();
        assert_eq!(got.len(), HEADER_LEN + want.len());
        assert_eq!(
            u32::from_ne_bytes(got[..4].try_into().unwrap()) as usize,
            got.len()
        );
        assert_eq!(i32::from_ne_bytes(got[4..8].try_into().unwrap()), 0);
        assert_eq!(u64::from_ne_bytes(got[8..16].try_into().unwrap()), 0xfeed);
        assert_eq!(&got[HEADER_LEN..], &want[..]);
    }

    /// A file shorter than its piece sends nothing, and the thread's next reply goes out
    /// whole (the half-filled pipe was dropped).
    #[test]
    fn a_short_file_sends_nothing() {
        let file = file_of(&[1u8; 100]);
        let (rx, tx) = device();
        let short = [Piece {
            file: &file,
            offset: 50,
            len: 100,
        }];
        assert_eq!(reply_from_files(tx.as_fd(), 1, &short), Spliced::NotSent);
        let whole = [Piece {
            file: &file,
            offset: 0,
            len: 100,
        }];
        assert_eq!(reply_from_files(tx.as_fd(), 2, &whole), Spliced::Sent);
        let got = received(rx, tx);
        assert_eq!(got.len(), HEADER_LEN + 100);
        assert_eq!(u64::from_ne_bytes(got[8..16].try_into().unwrap()), 2);
        assert_eq!(&got[HEADER_LEN..], &[1u8; 100]);
    }

    /// Either every request fits, or a limit below the largest request that leaves room for
    /// the header page in the largest pipe this process may make.
    #[test]
    fn the_reply_limit_leaves_room_for_the_header() {
        if let Some(limit) = reply_limit() {
            assert!(limit < LARGEST_REQUEST, "{limit}");
            assert_eq!(limit % page_size(), 0);
            let mut pipe = Pipe::new().unwrap();
            assert!(pipe.reserve(limit / page_size() + 1));
        }
    }

    /// A device that takes no spliced write refuses the reply (the mount then stops
    /// splicing), and the thread's next reply to a device that does goes out whole.
    #[test]
    fn a_device_that_takes_no_splice_refuses() {
        let file = file_of(&[3u8; 100]);
        let piece = [Piece {
            file: &file,
            offset: 0,
            len: 100,
        }];
        let not_writable = File::open("/dev/null").unwrap();
        let refused = reply_from_files(not_writable.as_fd(), 1, &piece);
        assert!(matches!(refused, Spliced::Refused(_)), "{refused:?}");
        let (rx, tx) = device();
        assert_eq!(reply_from_files(tx.as_fd(), 2, &piece), Spliced::Sent);
        assert_eq!(received(rx, tx).len(), HEADER_LEN + 100);
    }

    /// More pages than any pipe may hold are not spliced (the request is answered the usual
    /// way) and leave the pipe usable.
    #[test]
    fn more_than_a_pipe_holds_is_not_sent() {
        let file = file_of(&[7u8; 4096]);
        let (rx, tx) = device();
        // Checked before a byte is read: the file need not hold them.
        let all = [Piece {
            file: &file,
            offset: 0,
            len: 3 << 30,
        }];
        assert_eq!(reply_from_files(tx.as_fd(), 1, &all), Spliced::NotSent);
        let page = [Piece {
            file: &file,
            offset: 0,
            len: 4096,
        }];
        assert_eq!(reply_from_files(tx.as_fd(), 2, &page), Spliced::Sent);
        assert_eq!(received(rx, tx).len(), HEADER_LEN + 4096);
    }
}
