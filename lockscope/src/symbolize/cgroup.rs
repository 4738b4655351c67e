//! Cgroup ids (what the probes record) -> paths below the cgroup v2 root. The id of a
//! v2 cgroup is the inode number of its directory, so the hierarchy is walked once and
//! walked again only when an id is not known (a cgroup created since). Names once found
//! are kept: a cgroup removed later keeps its name in the recording.

use std::{
    collections::HashMap,
    fs,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use crate::decode::cgroup::{display_path, removed, v2_path_of_proc};

/// Walks are at most this often: a process in a cgroup removed before it was seen
/// costs one walk per interval, not one per snapshot.
const REWALK_AFTER: Duration = Duration::from_secs(1);
/// Directories a walk visits at most (a pathological hierarchy stays bounded).
const WALK_LIMIT: usize = 100_000;

#[derive(Debug)]
pub struct CgroupNames {
    root: Option<PathBuf>,
    known: HashMap<u64, String>,
    last_walk: Option<Instant>,
}

impl CgroupNames {
    /// Names below the mounted cgroup v2 root (none when it is not mounted).
    pub fn new() -> Self {
        Self::with_root(crate::probe::features::cgroup2_root().ok())
    }

    pub fn with_root(root: Option<PathBuf>) -> Self {
        Self {
            root,
            known: HashMap::new(),
            last_walk: None,
        }
    }

    /// The path of each id; ids never found are `[removed cgroup ID]`.
    pub fn resolve(&mut self, ids: impl IntoIterator<Item = u64>) -> HashMap<u64, String> {
        let ids: Vec<u64> = ids.into_iter().collect();
        let missing = ids.iter().any(|id| !self.known.contains_key(id));
        let due = self.last_walk.is_none_or(|t| t.elapsed() >= REWALK_AFTER);
        if missing
            && due
            && let Some(root) = self.root.clone()
        {
            self.walk(&root);
            self.last_walk = Some(Instant::now());
        }
        ids.into_iter()
            .map(|id| {
                let name = self.known.get(&id).cloned().unwrap_or_else(|| removed(id));
                (id, name)
            })
            .collect()
    }

    /// The cgroup of each process: the one its probes recorded, else (nothing recorded,
    /// e.g. an entry the LRU map evicted) the one `/proc` shows while it runs.
    pub fn processes(
        &mut self,
        tgids: impl IntoIterator<Item = u32>,
        recorded: &HashMap<u32, u64>,
    ) -> HashMap<u32, String> {
        let tgids: Vec<u32> = tgids.into_iter().collect();
        let ids = self.resolve(tgids.iter().filter_map(|t| recorded.get(t).copied()));
        tgids
            .into_iter()
            .filter_map(|tgid| {
                let name = match recorded.get(&tgid) {
                    Some(id) => ids.get(id).cloned(),
                    None => fs::read_to_string(format!("/proc/{tgid}/cgroup"))
                        .ok()
                        .and_then(|t| v2_path_of_proc(&t)),
                };
                name.map(|n| (tgid, n))
            })
            .collect()
    }

    fn walk(&mut self, root: &Path) {
        let mut stack = vec![root.to_path_buf()];
        let mut seen = 0usize;
        while let Some(dir) = stack.pop() {
            seen += 1;
            if seen > WALK_LIMIT {
                break;
            }
            let Ok(meta) = fs::metadata(&dir) else {
                continue;
            };
            let rel = dir.strip_prefix(root).unwrap_or(Path::new(""));
            self.known
                .entry(meta.ino())
                .or_insert_with(|| display_path(&rel.to_string_lossy()));
            let Ok(entries) = fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(e.path());
                }
            }
        }
    }
}

impl Default for CgroupNames {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_directory_inodes_and_names_outlive_the_directory() {
        let root = std::env::temp_dir().join(format!("lockscope-cg-{}", std::process::id()));
        let leaf = root.join("kubepods.slice/app.scope");
        fs::create_dir_all(&leaf).unwrap();
        let id = fs::metadata(&leaf).unwrap().ino();
        let root_id = fs::metadata(&root).unwrap().ino();
        let mut names = CgroupNames::with_root(Some(root.clone()));
        let got = names.resolve([id, root_id]);
        assert_eq!(got[&id], "kubepods.slice/app.scope");
        assert_eq!(got[&root_id], "/");
        fs::remove_dir_all(&root).unwrap();
        assert_eq!(names.resolve([id])[&id], "kubepods.slice/app.scope");
        assert_eq!(names.resolve([7])[&7], "[removed cgroup 7]");
    }
}
