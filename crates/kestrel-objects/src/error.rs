//! Input errors: each names the file, the object and the field, and says how to fix it.

use std::fmt;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadError {
    pub file: PathBuf,
    /// The object (`Pod default/train-0`, `pool gpu`, `row 17`), when known.
    pub object: Option<String>,
    /// The field path (`spec.containers[0].resources.requests.cpu`), when known.
    pub field: Option<String>,
    pub message: String,
}

impl LoadError {
    pub fn new(file: &Path, message: impl Into<String>) -> Self {
        LoadError {
            file: file.to_path_buf(),
            object: None,
            field: None,
            message: message.into(),
        }
    }

    pub fn object(mut self, object: impl Into<String>) -> Self {
        self.object = Some(object.into());
        self
    }

    pub fn field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(object) = &self.object {
            write!(f, ": {object}")?;
        }
        if let Some(field) = &self.field {
            write!(f, ": field {field}")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for LoadError {}
