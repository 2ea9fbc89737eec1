//! Kubernetes' `semver()` library: semantic versions and their CEL functions.

use std::any::Any;
use std::cmp::Ordering;

use super::*;
use cel::common::types::{CelBool, CelInt, CelString, Type};
use cel::common::value::{StaticVal, Val};
use cel::ExecutionError;

/// A semantic version (`kubernetes.Semver`), parsed as Kubernetes does (blang/semver's strict
/// `Parse`). Build metadata is checked, then ignored: it plays no part in comparisons.
#[derive(Debug, Clone)]
pub(super) struct Semver {
    major: u64,
    minor: u64,
    patch: u64,
    pre_release: Vec<PreRelease>,
}

/// A pre-release identifier. The variant order is the precedence: numeric identifiers rank
/// below alphanumeric ones.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum PreRelease {
    Numeric(u64),
    Alphanumeric(String),
}

pub(super) static SEMVER_TYPE: Type = Type::new_unspecified_type("kubernetes.Semver");

impl Semver {
    pub(super) fn parse(text: &str) -> Result<Semver, String> {
        let bad = |why: &str| format!("{text:?} is not a semantic version: {why}");
        let number = |part: &str, what: &str| {
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                Err(bad(&format!("the {what} is not a number")))
            } else if part.len() > 1 && part.starts_with('0') {
                Err(bad(&format!("the {what} has a leading zero")))
            } else {
                part.parse::<u64>()
                    .map_err(|_| bad(&format!("the {what} is too large")))
            }
        };
        let identifiers = |part: &str, what: &str| {
            let valid = |id: &str| {
                !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            };
            if part.split('.').all(valid) {
                Ok(())
            } else {
                Err(bad(&format!("malformed {what}")))
            }
        };
        let (version, build) = text
            .split_once('+')
            .map_or((text, None), |(v, b)| (v, Some(b)));
        if let Some(build) = build {
            identifiers(build, "build metadata")?;
        }
        let (core, pre_release) = version
            .split_once('-')
            .map_or((version, None), |(c, p)| (c, Some(p)));
        let mut parts = core.split('.');
        let (Some(major), Some(minor), Some(patch), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad("not MAJOR.MINOR.PATCH"));
        };
        let pre_release = match pre_release {
            None => Vec::new(),
            Some(pre_release) => {
                identifiers(pre_release, "pre-release")?;
                pre_release
                    .split('.')
                    .map(|id| {
                        if id.bytes().all(|b| b.is_ascii_digit()) {
                            number(id, "numeric pre-release identifier").map(PreRelease::Numeric)
                        } else {
                            Ok(PreRelease::Alphanumeric(id.to_owned()))
                        }
                    })
                    .collect::<Result<_, _>>()?
            }
        };
        Ok(Semver {
            major: number(major, "major version")?,
            minor: number(minor, "minor version")?,
            patch: number(patch, "patch version")?,
            pre_release,
        })
    }

    /// Semantic version precedence: a version without pre-release ranks above one with.
    fn precedence(&self, other: &Semver) -> Ordering {
        (self.major, self.minor, self.patch)
            .cmp(&(other.major, other.minor, other.patch))
            .then_with(
                || match (self.pre_release.is_empty(), other.pre_release.is_empty()) {
                    (true, true) => Ordering::Equal,
                    (true, false) => Ordering::Greater,
                    (false, true) => Ordering::Less,
                    (false, false) => self.pre_release.cmp(&other.pre_release),
                },
            )
    }
}

impl Val for Semver {
    fn get_type(&self) -> &Type {
        &SEMVER_TYPE
    }

    fn cel_type() -> &'static Type {
        &SEMVER_TYPE
    }

    fn equals(&self, other: &dyn Val) -> bool {
        other
            .downcast_ref::<Semver>()
            .is_some_and(|other| self.precedence(other).is_eq())
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(self.clone())
    }

    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}

impl StaticVal for Semver {}

pub(super) fn semver(text: &CelString<'_>) -> Result<Semver, ExecutionError> {
    Semver::parse(text.inner()).map_err(|e| ExecutionError::function_error("semver", e))
}

pub(super) fn is_semver(text: &CelString<'_>) -> CelBool {
    Semver::parse(text.inner()).is_ok().into()
}

pub(super) fn semver_compare_to(v: &Semver, other: &Semver) -> CelInt {
    ordering(v.precedence(other))
}

pub(super) fn semver_is_greater_than(v: &Semver, other: &Semver) -> CelBool {
    v.precedence(other).is_gt().into()
}

pub(super) fn semver_is_less_than(v: &Semver, other: &Semver) -> CelBool {
    v.precedence(other).is_lt().into()
}

// Versions past the largest int wrap, as they do in Kubernetes.
pub(super) fn major(v: &Semver) -> CelInt {
    (v.major as i64).into()
}

pub(super) fn minor(v: &Semver) -> CelInt {
    (v.minor as i64).into()
}

pub(super) fn patch(v: &Semver) -> CelInt {
    (v.patch as i64).into()
}
