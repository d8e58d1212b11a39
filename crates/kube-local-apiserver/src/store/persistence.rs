//! The store on disk under a data directory: a snapshot (`store/snapshot.json`, replaced atomically: written to a
//! temporary file, fsynced, renamed, directory fsynced) plus an append-only journal (`store/journal.jsonl`, one line per
//! committed change, written before the change is visible or acknowledged).
//!
//! Opening reads the snapshot, replays the journal entries newer than it (a torn last line from a crash mid-write
//! is dropped), writes a fresh snapshot and starts an empty journal. The snapshot is rewritten again after
//! [`COMPACT_AFTER`] journal entries and on shutdown. Durability: a change is in the journal (in the OS) before the
//! client gets its answer, so it survives the process being killed; the journal is fsynced only at snapshots, so an
//! OS crash or power loss can lose changes made since the last one.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};

use super::ObjectKey;
use crate::registry::StorageResource;

/// Journal entries after which the snapshot is rewritten and the journal restarted.
pub const COMPACT_AFTER: usize = 10_000;

#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the snapshot {path} is not valid: {why}")]
    Corrupt { path: PathBuf, why: String },
}

/// What was on disk.
pub struct Loaded {
    pub rv: u64,
    pub objects: BTreeMap<ObjectKey, Arc<Value>>,
}

/// The open journal of a persistent store.
pub struct Journal {
    dir: PathBuf,
    file: File,
    entries: usize,
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> PersistError {
    let path = path.to_path_buf();
    move |source| PersistError::Io { what, path, source }
}

fn key_json(key: &ObjectKey) -> Value {
    json!({"group": key.storage.group, "resource": key.storage.resource, "namespace": key.namespace, "name": key.name})
}

fn key_from(v: &Value) -> Option<ObjectKey> {
    let s = |k: &str| v.get(k).and_then(Value::as_str).map(String::from);
    Some(ObjectKey {
        storage: StorageResource {
            group: s("group")?,
            resource: s("resource")?,
        },
        namespace: s("namespace")?,
        name: s("name")?,
    })
}

impl Journal {
    fn snapshot_path(dir: &Path) -> PathBuf {
        dir.join("snapshot.json")
    }

    fn journal_path(dir: &Path) -> PathBuf {
        dir.join("journal.jsonl")
    }

    /// Loads `dir` (created if missing), compacts it into a fresh snapshot, and opens an empty journal.
    pub fn open(dir: &Path) -> Result<(Journal, Loaded), PersistError> {
        // The store holds every Secret: its directory and files are its owner's alone.
        crate::private_files::create_dir(dir).map_err(io("creating", dir))?;
        let mut loaded = read_snapshot(&Self::snapshot_path(dir))?;
        replay(&Self::journal_path(dir), &mut loaded)?;
        write_snapshot(dir, loaded.rv, loaded.objects.iter())?;
        let file = new_journal(dir)?;
        Ok((
            Journal {
                dir: dir.to_path_buf(),
                file,
                entries: 0,
            },
            loaded,
        ))
    }

    /// Appends one change (`object` None for a deletion) in a single write.
    pub fn append(
        &mut self,
        rv: u64,
        key: &ObjectKey,
        object: Option<&Value>,
    ) -> Result<(), PersistError> {
        let entry = match object {
            Some(o) => json!({"rv": rv, "key": key_json(key), "object": o}),
            None => json!({"rv": rv, "key": key_json(key), "deleted": true}),
        };
        let mut line = entry.to_string().into_bytes();
        line.push(b'\n');
        self.file
            .write_all(&line)
            .map_err(io("appending to", &Self::journal_path(&self.dir)))?;
        self.entries += 1;
        Ok(())
    }

    pub fn wants_compaction(&self) -> bool {
        self.entries >= COMPACT_AFTER
    }

    /// Replaces the snapshot with `objects` at `rv` and restarts the journal.
    pub fn compact<'a>(
        &mut self,
        rv: u64,
        objects: impl Iterator<Item = (&'a ObjectKey, &'a Arc<Value>)>,
    ) -> Result<(), PersistError> {
        write_snapshot(&self.dir, rv, objects)?;
        self.file = new_journal(&self.dir)?;
        self.entries = 0;
        Ok(())
    }
}

fn read_snapshot(path: &Path) -> Result<Loaded, PersistError> {
    let mut loaded = Loaded {
        rv: 0,
        objects: BTreeMap::new(),
    };
    let text = match std::fs::read(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(loaded),
        Err(e) => return Err(io("reading", path)(e)),
    };
    let corrupt = |why: String| PersistError::Corrupt {
        path: path.to_path_buf(),
        why,
    };
    let doc: Value = serde_json::from_slice(&text).map_err(|e| corrupt(e.to_string()))?;
    loaded.rv = doc
        .get("resourceVersion")
        .and_then(Value::as_u64)
        .ok_or_else(|| corrupt("no resourceVersion".into()))?;
    for entry in doc
        .get("objects")
        .and_then(Value::as_array)
        .ok_or_else(|| corrupt("no objects".into()))?
    {
        let key = entry
            .get("key")
            .and_then(key_from)
            .ok_or_else(|| corrupt(format!("an entry without a valid key: {entry}")))?;
        let object = entry
            .get("object")
            .cloned()
            .ok_or_else(|| corrupt(format!("an entry without an object: {entry}")))?;
        loaded.objects.insert(key, Arc::new(object));
    }
    Ok(loaded)
}

/// Applies the journal's entries newer than the snapshot; stops at the first line that does not parse (a write cut
/// short by a crash can only be the last one).
fn replay(path: &Path, loaded: &mut Loaded) -> Result<(), PersistError> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io("opening", path)(e)),
    };
    for (n, line) in BufReader::new(file).split(b'\n').enumerate() {
        let line = line.map_err(io("reading", path))?;
        let parsed = serde_json::from_slice::<Value>(&line).ok().and_then(|e| {
            let rv = e.get("rv").and_then(Value::as_u64)?;
            let key = e.get("key").and_then(key_from)?;
            Some((rv, key, e.get("object").cloned()))
        });
        let Some((rv, key, object)) = parsed else {
            tracing::warn!(journal = %path.display(), line = n + 1, "ignoring an unreadable journal entry and all after it");
            break;
        };
        if rv <= loaded.rv {
            continue;
        }
        loaded.rv = rv;
        match object {
            Some(o) => loaded.objects.insert(key, Arc::new(o)),
            None => loaded.objects.remove(&key),
        };
    }
    Ok(())
}

fn write_snapshot<'a>(
    dir: &Path,
    rv: u64,
    objects: impl Iterator<Item = (&'a ObjectKey, &'a Arc<Value>)>,
) -> Result<(), PersistError> {
    let path = Journal::snapshot_path(dir);
    let tmp = dir.join("snapshot.json.tmp");
    let entries: Vec<Value> = objects
        .map(|(k, o)| json!({"key": key_json(k), "object": **o}))
        .collect();
    let doc = json!({"resourceVersion": rv, "objects": entries});
    let mut file = crate::private_files::open(&tmp, false).map_err(io("creating", &tmp))?;
    file.write_all(doc.to_string().as_bytes())
        .map_err(io("writing", &tmp))?;
    file.sync_all().map_err(io("syncing", &tmp))?;
    drop(file);
    std::fs::rename(&tmp, &path).map_err(io("renaming the snapshot to", &path))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("syncing", dir))?;
    Ok(())
}

/// Starts an empty journal (its entries are all in the snapshot just written).
fn new_journal(dir: &Path) -> Result<File, PersistError> {
    let path = Journal::journal_path(dir);
    crate::private_files::open(&path, false).map_err(io("creating", &path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::key;

    #[test]
    fn the_journal_is_replayed_and_a_torn_last_line_ignored() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut j, loaded) = Journal::open(dir.path()).unwrap();
            assert_eq!(loaded.rv, 0);
            j.append(1, &key("a"), Some(&json!({"v": 1}))).unwrap();
            j.append(2, &key("b"), Some(&json!({"v": 2}))).unwrap();
            j.append(3, &key("a"), None).unwrap();
        }
        let journal = dir.path().join("journal.jsonl");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&journal)
            .unwrap();
        f.write_all(b"{\"rv\": 4, \"key\": {\"gro").unwrap();
        drop(f);
        let (_, loaded) = Journal::open(dir.path()).unwrap();
        assert_eq!(loaded.rv, 3);
        assert_eq!(loaded.objects.len(), 1);
        assert_eq!(*loaded.objects[&key("b")], json!({"v": 2}));
        // Opening compacted everything into the snapshot.
        assert_eq!(std::fs::read(&journal).unwrap(), b"");
        let (_, again) = Journal::open(dir.path()).unwrap();
        assert_eq!(again.rv, 3);
    }

    #[test]
    fn entries_already_in_the_snapshot_are_not_applied_twice() {
        let dir = tempfile::tempdir().unwrap();
        let objects: BTreeMap<ObjectKey, Arc<Value>> = [(key("a"), Arc::new(json!({"v": 5})))]
            .into_iter()
            .collect();
        write_snapshot(dir.path(), 5, objects.iter()).unwrap();
        // A crash between writing the snapshot and restarting the journal leaves old entries behind.
        std::fs::write(
            dir.path().join("journal.jsonl"),
            format!(
                "{}\n{}\n",
                json!({"rv": 4, "key": key_json(&key("a")), "deleted": true}),
                json!({"rv": 6, "key": key_json(&key("c")), "object": {"v": 6}})
            ),
        )
        .unwrap();
        let (_, loaded) = Journal::open(dir.path()).unwrap();
        assert_eq!(loaded.rv, 6);
        assert_eq!(loaded.objects.len(), 2);
    }
}
