//! Source files read for code excerpts, kept while they are unchanged: a
//! program stepped within one file would otherwise have the whole file read
//! at every stop, and a stack trace reads one file per frame.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, OnceLock},
    time::SystemTime,
};

/// Files above this size are read each time instead of kept.
const MAX_KEPT_FILE: u64 = 1 << 20;
/// What all kept files may add up to; past it the cache starts over.
const MAX_KEPT_TOTAL: usize = 16 << 20;

/// A file's text and where its lines start.
struct Source {
    modified: Option<SystemTime>,
    len: u64,
    text: Arc<str>,
    starts: Arc<[usize]>,
}

#[derive(Default)]
struct Cache {
    files: HashMap<String, Source>,
    bytes: usize,
}

fn cache() -> &'static Mutex<Cache> {
    static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// Lines `first..first + count` (1-based) of the file at `path`, without
/// their line ends; `None` when it is not a readable file of at most
/// `max_bytes`.
pub fn lines(path: &str, first: u32, count: u32, max_bytes: u64) -> Option<Vec<String>> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() || meta.len() > max_bytes {
        return None;
    }
    let modified = meta.modified().ok();
    let kept = {
        let cache = cache().lock().unwrap_or_else(|e| e.into_inner());
        cache
            .files
            .get(path)
            .filter(|s| s.modified == modified && s.len == meta.len() && modified.is_some())
            .map(|s| (s.text.clone(), s.starts.clone()))
    };
    let (text, starts) = match kept {
        Some(found) => found,
        None => {
            let text: Arc<str> = std::fs::read_to_string(path).ok()?.into();
            let starts: Arc<[usize]> = std::iter::once(0)
                .chain(text.match_indices('\n').map(|(i, _)| i + 1))
                .collect();
            if meta.len() <= MAX_KEPT_FILE && modified.is_some() {
                keep(
                    path,
                    Source {
                        modified,
                        len: meta.len(),
                        text: text.clone(),
                        starts: starts.clone(),
                    },
                );
            }
            (text, starts)
        }
    };
    let first = first.max(1) as usize - 1;
    let out: Vec<String> = (first..first + count as usize)
        .map_while(|i| {
            let start = *starts.get(i)?;
            let end = starts.get(i + 1).copied().unwrap_or(text.len());
            (start < text.len()).then(|| {
                let line = &text[start..end];
                let line = line.strip_suffix('\n').unwrap_or(line);
                line.strip_suffix('\r').unwrap_or(line).to_owned()
            })
        })
        .collect();
    Some(out)
}

fn keep(path: &str, source: Source) {
    let mut cache = cache().lock().unwrap_or_else(|e| e.into_inner());
    if cache.bytes + source.text.len() > MAX_KEPT_TOTAL {
        cache.files.clear();
        cache.bytes = 0;
    }
    cache.bytes += source.text.len();
    if let Some(old) = cache.files.insert(path.to_owned(), source) {
        cache.bytes -= old.text.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_follow_the_file_as_it_changes() {
        let dir = std::env::temp_dir().join(format!("stepd-sources-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.py");
        let path_str = path.to_str().unwrap();
        std::fs::write(&path, "one\r\ntwo\nthree").unwrap();
        assert_eq!(
            lines(path_str, 1, 5, 1 << 20).unwrap(),
            ["one", "two", "three"]
        );
        assert_eq!(lines(path_str, 2, 1, 1 << 20).unwrap(), ["two"]);
        assert!(lines(path_str, 9, 2, 1 << 20).unwrap().is_empty());
        // A change of length is seen at once, whatever the clock's resolution.
        std::fs::write(&path, "uno\ndos\ntres\ncuatro\n").unwrap();
        assert_eq!(lines(path_str, 3, 5, 1 << 20).unwrap(), ["tres", "cuatro"]);
        assert!(lines(path_str, 1, 1, 2).is_none(), "over the size limit");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
