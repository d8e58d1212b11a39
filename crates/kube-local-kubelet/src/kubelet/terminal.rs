//! Pseudo-terminals: the one an exec with `tty=true` runs on, and the one a container with `tty: true` runs on for
//! its whole run. The process's standard streams are the terminal's slave end; the kubelet reads and writes the
//! master end (everything the process prints is one stream, which upstream puts on the stdout channel with a TTY),
//! and a resize message (channel 4, `{"Width": …, "Height": …}`) sets the window size.

use std::io;
use std::os::fd::OwnedFd;

use rustix::pty::{OpenptFlags, grantpt, ioctl_tiocgptpeer, openpt, unlockpt};
use rustix::termios::{Winsize, tcsetwinsize};
use serde::Deserialize;

/// The master end of a pseudo-terminal.
pub(crate) struct Terminal {
    master: OwnedFd,
}

/// A resize message's body (upstream's `remotecommand.TerminalSize`).
#[derive(Debug, Deserialize, PartialEq)]
#[serde(rename_all = "PascalCase")]
struct TerminalSize {
    width: u16,
    height: u16,
}

impl Terminal {
    /// A new pseudo-terminal and its slave end, for the command's stdin, stdout and stderr. Neither end becomes the
    /// kubelet's controlling terminal.
    pub(crate) fn open() -> io::Result<(Terminal, OwnedFd)> {
        let flags = OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC;
        let master = openpt(flags)?;
        grantpt(&master)?;
        unlockpt(&master)?;
        let slave = ioctl_tiocgptpeer(&master, flags)?;
        Ok((Terminal { master }, slave))
    }

    /// The master end to read the command's output from and write its input to (reads fail with EIO once every
    /// process has closed the slave end: the end of the output).
    pub(crate) fn io(&self) -> io::Result<(tokio::fs::File, tokio::fs::File)> {
        Ok((self.master_file()?, self.master_file()?))
    }

    /// One more handle on the master end, for reading or writing.
    pub(crate) fn master_file(&self) -> io::Result<tokio::fs::File> {
        let file = std::fs::File::from(self.master.try_clone()?);
        Ok(tokio::fs::File::from_std(file))
    }

    /// Applies a resize message; a malformed one is ignored, as upstream's kubelet logs and drops it.
    pub(crate) fn resize(&self, message: &[u8]) {
        let Ok(size) = serde_json::from_slice::<TerminalSize>(message) else {
            tracing::debug!("ignoring a malformed terminal size");
            return;
        };
        let winsize = Winsize {
            ws_row: size.height,
            ws_col: size.width,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        if let Err(e) = tcsetwinsize(&self.master, winsize) {
            tracing::debug!(error = %e, "setting the terminal size");
        }
    }
}

/// What a process on a terminal finds in its environment: `TERM=xterm` unless the container sets its own, as
/// container runtimes give it.
pub(crate) fn add_term(env: &mut Vec<(String, String)>) {
    if !env.iter().any(|(k, _)| k == "TERM") {
        env.push(("TERM".into(), "xterm".into()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resize_sets_the_window_size_of_the_terminal() {
        let (terminal, slave) = Terminal::open().unwrap();
        terminal.resize(br#"{"Width":100,"Height":30}"#);
        let size = rustix::termios::tcgetwinsize(&slave).unwrap();
        assert_eq!((size.ws_col, size.ws_row), (100, 30));
        terminal.resize(b"not json");
        let size = rustix::termios::tcgetwinsize(&slave).unwrap();
        assert_eq!((size.ws_col, size.ws_row), (100, 30));
    }
}
