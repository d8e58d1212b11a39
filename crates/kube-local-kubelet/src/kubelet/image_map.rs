//! Resolves container images to local executables: the process kubelet's stand-in for pulling images.
//!
//! An image maps to a directory of executables (where a container's `command[0]` is looked up) and optionally an
//! entrypoint and default arguments, as an image's `ENTRYPOINT` and `CMD`: a container's `command` replaces the
//! entrypoint (and the default arguments), its `args` replace the default arguments. The map is TOML:
//!
//! ```toml
//! [[image]]
//! pattern = "registry.k8s.io/etcd:3.5.*"   # `*` matches any run of characters
//! bin_dir = "/opt/etcd-3.5/bin"
//! entrypoint = ["etcd"]                    # optional
//! cmd = []                                 # optional
//! ```
//!
//! The first matching entry wins; entries added later (from a file or the builder) take precedence over defaults.
//!
//! The defaults map the images people pass to `kubectl debug --image` (busybox, alpine, ubuntu, debian) to the
//! host's `/bin`, running `sh` when given no command, as those images run their shell by default (no entrypoint,
//! the shell as default arguments): a debug container is a shell with the host's tools. Every other image is
//! unmapped until an embedder or a file maps it.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Where a mapped image's programs live.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct ImageTarget {
    /// Directory in which `command[0]` is resolved.
    #[serde(default)]
    pub bin_dir: Option<PathBuf>,
    /// The image's entrypoint: the program (a path, or a name in `bin_dir`) and leading arguments.
    #[serde(default)]
    pub entrypoint: Vec<String>,
    /// The image's default arguments (its `CMD`): what follows the entrypoint when the container has neither
    /// `command` nor `args` — or the whole command line of an image without entrypoint.
    #[serde(default)]
    pub cmd: Vec<String>,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
struct Entry {
    pattern: String,
    #[serde(flatten)]
    target: ImageTarget,
}

#[derive(Debug, Default, Deserialize)]
struct File {
    #[serde(default)]
    image: Vec<Entry>,
}

#[derive(Debug, thiserror::Error)]
pub enum ImageMapError {
    #[error("reading the image map {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("parsing the image map {path}: {source}")]
    Parse {
        path: PathBuf,
        source: Box<toml::de::Error>,
    },
}

/// Image patterns and their local targets.
#[derive(Clone, Debug)]
pub struct ImageMap {
    entries: Vec<Entry>,
}

/// The images users debug with (`kubectl debug --image=busybox`), short and fully qualified.
const DEBUG_IMAGES: [&str; 4] = ["busybox", "alpine", "ubuntu", "debian"];

impl Default for ImageMap {
    /// The debug images (see the module docs).
    fn default() -> Self {
        let shell = ImageTarget {
            bin_dir: Some(PathBuf::from("/bin")),
            entrypoint: Vec::new(),
            cmd: vec!["sh".into()],
        };
        let entries = DEBUG_IMAGES
            .iter()
            .flat_map(|name| [format!("{name}*"), format!("docker.io/library/{name}*")])
            .map(|pattern| Entry {
                pattern,
                target: shell.clone(),
            })
            .collect();
        ImageMap { entries }
    }
}

/// What a container runs: the resolved program and its arguments.
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    pub path: PathBuf,
    pub args: Vec<String>,
}

/// Why a container's program could not be resolved.
#[derive(Clone, Debug, PartialEq)]
pub enum ResolveError {
    /// No entry matches the image: the kubelet reports `ErrImagePull`.
    Unmapped(String),
    /// The image is mapped but the program is not there: the kubelet reports `RunContainerError`.
    NotFound(String),
}

/// The directories searched for commands the image's own directory lacks (images usually carry a shell; the host's
/// stands in for it).
const HOST_PATH: [&str; 6] = [
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];

impl ImageMap {
    /// Adds a mapping that takes precedence over the existing ones.
    pub fn insert(&mut self, pattern: impl Into<String>, target: ImageTarget) {
        self.entries.insert(
            0,
            Entry {
                pattern: pattern.into(),
                target,
            },
        );
    }

    /// Parses TOML (see the module docs).
    pub fn parse(text: &str, origin: &Path) -> Result<ImageMap, ImageMapError> {
        let file: File = toml::from_str(text).map_err(|e| ImageMapError::Parse {
            path: origin.to_path_buf(),
            source: Box::new(e),
        })?;
        Ok(ImageMap {
            entries: file.image,
        })
    }

    /// Reads a TOML file whose entries take precedence over this map's.
    pub fn overlay_file(&mut self, path: &Path) -> Result<(), ImageMapError> {
        let text = std::fs::read_to_string(path).map_err(|source| ImageMapError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let mut over = ImageMap::parse(&text, path)?;
        over.entries.append(&mut self.entries);
        self.entries = over.entries;
        Ok(())
    }

    pub fn lookup(&self, image: &str) -> Option<&ImageTarget> {
        self.entries
            .iter()
            .find(|e| glob_match(&e.pattern, image))
            .map(|e| &e.target)
    }

    /// The program and arguments a container with this image, `command` and `args` runs, as a container runtime
    /// combines them: `command` replaces the entrypoint and the default arguments, `args` replace the default
    /// arguments.
    pub fn resolve(
        &self,
        image: &str,
        command: &[String],
        args: &[String],
    ) -> Result<Program, ResolveError> {
        let target = self
            .lookup(image)
            .ok_or_else(|| ResolveError::Unmapped(image.to_string()))?;
        let mut argv: Vec<String> = if command.is_empty() {
            target.entrypoint.clone()
        } else {
            command.to_vec()
        };
        if command.is_empty() && args.is_empty() {
            argv.extend(target.cmd.iter().cloned());
        } else {
            argv.extend(args.iter().cloned());
        }
        let Some(first) = argv.first().cloned() else {
            return Err(ResolveError::NotFound(format!(
                "no command specified and image {image} has no entrypoint"
            )));
        };
        let path = find_program(target.bin_dir.as_deref(), &first).ok_or_else(|| {
            ResolveError::NotFound(format!(
                "exec: \"{first}\": executable file not found in $PATH"
            ))
        })?;
        Ok(Program {
            path,
            args: argv[1..].to_vec(),
        })
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// An absolute path is first looked up by its file name in the image's directory (the image's `/usr/local/bin/etcd`
/// is the mapped `etcd`), then taken as a host path; a bare name is searched in the image's directory, then the
/// host's standard directories.
fn find_program(bin_dir: Option<&Path>, name: &str) -> Option<PathBuf> {
    let path = Path::new(name);
    let file_name = path.file_name()?;
    if let Some(dir) = bin_dir {
        let candidate = dir.join(file_name);
        if is_executable(&candidate) {
            return Some(candidate);
        }
    }
    if path.is_absolute() {
        return is_executable(path).then(|| path.to_path_buf());
    }
    if name.contains('/') {
        return None;
    }
    HOST_PATH
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| is_executable(p))
}

/// `*` matches any run of characters (including `/` and `:`); everything else matches itself.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, rest) = (parts[0], &parts[1..]);
    let Some(mut remaining) = text.strip_prefix(first) else {
        return false;
    };
    let last = rest.len() - 1;
    for (i, part) in rest.iter().enumerate() {
        if i == last {
            return remaining.ends_with(part);
        }
        match remaining.find(part) {
            Some(at) => remaining = &remaining[at + part.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match(
            "registry.k8s.io/etcd:3.5.*",
            "registry.k8s.io/etcd:3.5.16-0"
        ));
        assert!(!glob_match(
            "registry.k8s.io/etcd:3.5.*",
            "registry.k8s.io/etcd:3.4.16-0"
        ));
        assert!(glob_match("example.com/tool:*", "example.com/tool:test"));
        assert!(glob_match("a*b*c", "axxbyyc"));
        assert!(!glob_match("a*b*c", "axxbyy"));
        assert!(glob_match("exact", "exact"));
    }

    /// What an embedder maps: an etcd line to a directory, an image to a program.
    fn sample() -> ImageMap {
        let mut map = ImageMap::default();
        map.insert(
            "example.com/tool:*",
            ImageTarget {
                bin_dir: Some(PathBuf::from("/opt/tool/bin")),
                entrypoint: vec!["/bin/true".into()],
                cmd: Vec::new(),
            },
        );
        map.insert(
            "registry.k8s.io/etcd:3.4.*",
            ImageTarget {
                bin_dir: Some(PathBuf::from("/usr/bin")),
                entrypoint: vec!["etcd".into()],
                cmd: Vec::new(),
            },
        );
        map
    }

    #[test]
    fn images_resolve_to_their_program_and_unmapped_ones_do_not() {
        let map = sample();
        let p = map
            .resolve(
                "registry.k8s.io/etcd:3.4.23-0",
                &["etcd".into()],
                &["--x".into()],
            )
            .unwrap();
        assert_eq!(p.path, PathBuf::from("/usr/bin/etcd"));
        assert_eq!(p.args, vec!["--x".to_string()]);
        let p = map
            .resolve("example.com/tool:1", &[], &["member-init".into()])
            .unwrap();
        assert_eq!(p.path, PathBuf::from("/bin/true"));
        assert_eq!(p.args, vec!["member-init".to_string()]);
        assert_eq!(
            map.resolve("nginx:1", &[], &[]),
            Err(ResolveError::Unmapped("nginx:1".into()))
        );
    }

    #[test]
    fn debug_images_are_the_host_shell_by_default() {
        let map = ImageMap::default();
        for image in [
            "busybox",
            "busybox:1.36",
            "docker.io/library/busybox:latest",
            "alpine:3",
            "ubuntu",
            "docker.io/library/debian:bookworm",
        ] {
            let p = map.resolve(image, &[], &[]).unwrap();
            assert_eq!(p.path, PathBuf::from("/bin/sh"), "{image}");
            assert!(p.args.is_empty());
        }
        // `kubectl debug -- sh -c …` sets the command; `kubectl run -- sh -c …` the arguments, which replace the
        // default `sh`.
        let sh_c = (
            PathBuf::from("/bin/sh"),
            vec!["-c".to_string(), "true".to_string()],
        );
        let p = map
            .resolve("busybox", &["sh".into(), "-c".into()], &["true".into()])
            .unwrap();
        assert_eq!((p.path, p.args), sh_c.clone());
        let p = map
            .resolve("busybox", &[], &["sh".into(), "-c".into(), "true".into()])
            .unwrap();
        assert_eq!((p.path, p.args), sh_c);
        assert!(matches!(
            map.resolve("docker.io/library/nginx:1", &[], &[]),
            Err(ResolveError::Unmapped(_))
        ));
    }

    #[test]
    fn toml_overlay_takes_precedence() {
        let mut map = sample();
        let over = ImageMap::parse(
            "[[image]]\npattern = \"registry.k8s.io/etcd:*\"\nbin_dir = \"/usr/bin\"\nentrypoint = [\"sh\"]\n",
            Path::new("x.toml"),
        )
        .unwrap();
        let mut entries = over.entries;
        entries.append(&mut map.entries);
        map.entries = entries;
        let p = map.resolve("registry.k8s.io/etcd:3.5.1", &[], &[]).unwrap();
        assert_eq!(p.path, PathBuf::from("/usr/bin/sh"));
    }
}
