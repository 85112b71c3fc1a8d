//! A statement as the store hands it around: SQL written once for both
//! backends (`$1`, `$2`, … placeholders, which SQLite and PostgreSQL both
//! read; the wide insert of history events alone is spelt per backend, in
//! `history.rs`) and the values bound to it, owned so that a batch that
//! failed can be run again write by write.

/// One statement of a read or a write.
#[derive(Clone, Debug)]
pub(super) struct Statement {
    pub sql: &'static str,
    pub binds: Vec<Bind>,
}

/// A value bound to a statement's next placeholder.
#[derive(Clone, Debug)]
pub(super) enum Bind {
    Int(i64),
    Text(String),
    Blob(Vec<u8>),
}

impl Statement {
    pub fn new(sql: &'static str) -> Self {
        Self {
            sql,
            binds: Vec::new(),
        }
    }

    pub fn bind(mut self, value: impl Into<Bind>) -> Self {
        self.binds.push(value.into());
        self
    }
}

impl From<i64> for Bind {
    fn from(v: i64) -> Self {
        Self::Int(v)
    }
}

impl From<&str> for Bind {
    fn from(v: &str) -> Self {
        Self::Text(v.to_owned())
    }
}

impl From<Vec<u8>> for Bind {
    fn from(v: Vec<u8>) -> Self {
        Self::Blob(v)
    }
}
