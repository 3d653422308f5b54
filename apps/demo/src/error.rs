//! The runner's one error type: either the user stopped it, or something failed and the message
//! says what.

use std::fmt;

#[derive(Debug)]
pub enum Error {
    /// SIGINT, SIGTERM or SIGHUP arrived; everything started has been (or is being) stopped.
    Interrupted,
    Failed(String),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn msg(m: impl Into<String>) -> Error {
        Error::Failed(m.into())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Interrupted => f.write_str("interrupted"),
            Error::Failed(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for Error {}

/// Adds what was being done to an error's message.
pub trait Context<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T, E: fmt::Display> Context<T> for std::result::Result<T, E> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::Failed(format!("{}: {e}", what())))
    }
}
