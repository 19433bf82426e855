//! From the contract's read/write/exec to Landlock filesystem rights.
//!
//! * read  → ReadFile | ReadDir
//! * write → read + WriteFile, Truncate, MakeReg, MakeDir, MakeSym, MakeFifo, MakeSock,
//!   RemoveFile, RemoveDir, Refer, IoctlDev, ResolveUnix (never MakeChar/MakeBlock)
//! * exec  → read + Execute
//!
//! The three are independent: a writable directory is not executable unless it is
//! also exec-granted. Every right is intersected with what the ABI handles, and on a
//! non-directory (regular file, device, socket, fifo) with the rights that apply to
//! files, as the kernel rejects directory rights on a file.
//!
//! ResolveUnix (ABI 9: connect to a pathname Unix socket) goes with write: a child may
//! talk to sockets in places it could create them, never to the host's docker.sock or
//! ssh-agent elsewhere.

use landlock::{make_bitflags, Access as _, AccessFs, BitFlags, ABI};

use crate::plan::Access;

const READ: BitFlags<AccessFs> = make_bitflags!(AccessFs::{ReadFile | ReadDir});

const WRITE: BitFlags<AccessFs> = make_bitflags!(AccessFs::{
    WriteFile | Truncate | MakeReg | MakeDir | MakeSym | MakeFifo | MakeSock
    | RemoveFile | RemoveDir | Refer | IoctlDev | ResolveUnix
});

/// Every filesystem right of `abi`: all of them are handled (denied unless granted).
pub(super) fn handled(abi: ABI) -> BitFlags<AccessFs> {
    AccessFs::from_all(abi)
}

/// The rights a grant of `access` gives on a directory (`is_dir`) or a file.
pub(super) fn for_access(access: Access, abi: ABI, is_dir: bool) -> BitFlags<AccessFs> {
    if access.is_empty() {
        return BitFlags::EMPTY;
    }
    let mut r = READ;
    if access.write {
        r |= WRITE;
    }
    if access.exec {
        r |= AccessFs::Execute;
    }
    r &= AccessFs::from_all(abi);
    if !is_dir {
        r &= AccessFs::from_file(abi);
    }
    r
}

/// Listing only: given to a carved directory whose denied entries are all files.
pub(super) fn list_only(abi: ABI) -> BitFlags<AccessFs> {
    BitFlags::from(AccessFs::ReadDir) & AccessFs::from_all(abi)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_write_exec_are_separate() {
        let abi = ABI::V7;
        let w = for_access(Access::WRITE, abi, true);
        assert!(w.contains(AccessFs::WriteFile | AccessFs::Truncate | AccessFs::Refer));
        assert!(w.contains(AccessFs::ReadFile | AccessFs::IoctlDev));
        assert!(!w.contains(AccessFs::Execute));
        assert!(!w.intersects(AccessFs::MakeChar | AccessFs::MakeBlock));
        let x = for_access(Access::EXEC, abi, true);
        assert_eq!(
            x,
            AccessFs::Execute | AccessFs::ReadFile | AccessFs::ReadDir
        );
        assert_eq!(for_access(Access::READ, abi, true), READ);
        assert!(for_access(Access::default(), abi, true).is_empty());
    }

    #[test]
    fn file_rights_are_masked() {
        let f = for_access(Access::WRITE, ABI::V7, false);
        assert_eq!(
            f,
            AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev
        );
        assert_eq!(for_access(Access::READ, ABI::V7, false), AccessFs::ReadFile);
    }

    #[test]
    fn rights_follow_the_abi() {
        let w1 = for_access(Access::WRITE, ABI::V1, true);
        assert!(!w1.intersects(AccessFs::Refer | AccessFs::Truncate | AccessFs::IoctlDev));
        assert!(handled(ABI::V7).contains(for_access(
            Access {
                read: true,
                write: true,
                exec: true
            },
            ABI::V7,
            true
        )));
        assert!(handled(ABI::Unsupported).is_empty());
    }
}
