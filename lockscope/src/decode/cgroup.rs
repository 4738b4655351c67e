//! Cgroup paths: their text form, and what a path says about Kubernetes pods and
//! containers. Pure: the paths come from the caller.

/// The name lockscope gives a cgroup: its path below the v2 root without the leading
/// `/` (`system.slice/nginx.service`), `/` for the root itself.
pub fn display_path(rel: &str) -> String {
    let p = rel.trim_matches('/');
    if p.is_empty() {
        "/".to_owned()
    } else {
        p.to_owned()
    }
}

/// A cgroup seen by id whose directory was gone before it could be named.
pub fn removed(id: u64) -> String {
    format!("[removed cgroup {id}]")
}

/// Where no cgroup was recorded for a process (and it was gone before `/proc` could tell).
pub const UNKNOWN: &str = "[unknown]";

/// The v2 path in a `/proc/PID/cgroup` file (its `0::PATH` line).
pub fn v2_path_of_proc(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(display_path)
}

/// The Kubernetes pod UID in a cgroup path, in its usual form (dashes), from either
/// cgroup driver: systemd (`kubepods-burstable-pod<uid with _>.slice`) or cgroupfs
/// (`kubepods/burstable/pod<uid>`).
pub fn pod_uid(path: &str) -> Option<String> {
    path.split('/').rev().find_map(|seg| {
        let seg = seg.strip_suffix(".slice").unwrap_or(seg);
        let i = seg.rfind("pod")?;
        // `pod` starts the segment or follows a `-` (systemd slices nest by dashes).
        if i != 0 && !seg[..i].ends_with('-') {
            return None;
        }
        let uid = seg[i + 3..].replace('_', "-");
        is_uuid(&uid).then_some(uid)
    })
}

/// The container ID in a cgroup path: the 64 hex digits of a container runtime's scope
/// (`cri-containerd-<id>.scope`, `docker-<id>.scope`, `crio-<id>.scope`,
/// `libpod-<id>.scope`) or of a cgroupfs directory named by the ID alone.
pub fn container_id(path: &str) -> Option<String> {
    let last = path.rsplit('/').next()?;
    let name = last.strip_suffix(".scope").unwrap_or(last);
    let id = name.rsplit('-').next()?;
    let lower_hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
    (id.len() == 64 && id.bytes().all(lower_hex)).then(|| id.to_owned())
}

fn is_uuid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn paths_are_relative_to_the_root() {
        assert_eq!(
            display_path("/system.slice/nginx.service"),
            "system.slice/nginx.service"
        );
        assert_eq!(display_path("/"), "/");
        assert_eq!(display_path(""), "/");
        assert_eq!(
            v2_path_of_proc("12:cpu:/x\n0::/user.slice/user-0.slice/session-1.scope\n").as_deref(),
            Some("user.slice/user-0.slice/session-1.scope")
        );
        assert_eq!(v2_path_of_proc("0::/\n").as_deref(), Some("/"));
        assert_eq!(v2_path_of_proc("1:name=systemd:/x\n"), None);
    }

    #[test]
    fn pod_uids_come_from_either_cgroup_driver() {
        let systemd = format!(
            "kubepods.slice/kubepods-burstable.slice/\
             kubepods-burstable-pod1b2c3d4e_5f60_7a8b_9c0d_e1f2a3b4c5d6.slice/\
             cri-containerd-{ID}.scope"
        );
        assert_eq!(
            pod_uid(&systemd).as_deref(),
            Some("1b2c3d4e-5f60-7a8b-9c0d-e1f2a3b4c5d6")
        );
        assert_eq!(container_id(&systemd).as_deref(), Some(ID));
        let besteffort = "kubepods.slice/kubepods-pod1b2c3d4e_5f60_7a8b_9c0d_e1f2a3b4c5d6.slice";
        assert!(pod_uid(besteffort).is_some());
        assert_eq!(container_id(besteffort), None);

        let cgroupfs = format!("kubepods/burstable/pod1b2c3d4e-5f60-7a8b-9c0d-e1f2a3b4c5d6/{ID}");
        assert_eq!(
            pod_uid(&cgroupfs).as_deref(),
            Some("1b2c3d4e-5f60-7a8b-9c0d-e1f2a3b4c5d6")
        );
        assert_eq!(container_id(&cgroupfs).as_deref(), Some(ID));
    }

    #[test]
    fn ordinary_paths_carry_no_pod_or_container() {
        for p in [
            "/",
            "system.slice/nginx.service",
            "system.slice/podman.service",
            "user.slice/user-1000.slice/pod-thing",
            "system.slice/docker-short.scope",
        ] {
            assert_eq!(pod_uid(p), None, "{p}");
            assert_eq!(container_id(p), None, "{p}");
        }
        assert_eq!(
            container_id(&format!("system.slice/docker-{ID}.scope")).as_deref(),
            Some(ID)
        );
        assert_eq!(
            container_id(&format!("machine.slice/libpod-{ID}.scope")).as_deref(),
            Some(ID)
        );
    }
}
