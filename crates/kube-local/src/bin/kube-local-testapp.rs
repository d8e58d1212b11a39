//! A tiny workload for kube-local's kubelet tests: serves HTTP on the pod's address and can record its starts in a
//! file (to show a volume's data surviving a pod's re-creation).
//!
//! Environment: `LISTEN` (default `$POD_IP:8080`), `RECORD_FILE` (append `$HOSTNAME` and a newline at start, and
//! print `testapp start N`, N counting the starts recorded there),
//! `EXIT_AFTER_MS` (exit with `EXIT_CODE`, default 0, after that long instead of serving forever).
//! `GET /file?path=P` answers with the file's content, `GET /fail` makes later `/healthz` answer 500, anything else
//! answers 200 with the hostname.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};

static FAILING: AtomicBool = AtomicBool::new(false);

fn main() {
    let hostname = std::env::var("HOSTNAME").unwrap_or_default();
    let mut start = None;
    if let Ok(file) = std::env::var("RECORD_FILE") {
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&file)
            .and_then(|mut f| writeln!(f, "{hostname}"))
            .and_then(|()| std::fs::read_to_string(&file));
        match appended {
            Ok(record) => start = Some(record.lines().count()),
            Err(e) => {
                eprintln!("recording the start in {file}: {e}");
                std::process::exit(1);
            }
        }
    }
    println!("testapp {hostname} starting");
    if let Some(n) = start {
        println!("testapp start {n}");
    }
    if let Ok(ms) = std::env::var("EXIT_AFTER_MS") {
        let ms: u64 = ms.parse().unwrap_or(0);
        std::thread::sleep(std::time::Duration::from_millis(ms));
        let code: i32 = std::env::var("EXIT_CODE")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        if let Ok(path) = std::env::var("MESSAGE_FILE") {
            let _ = std::fs::write(path, format!("exiting with {code}"));
        }
        println!("testapp exiting with {code}");
        std::process::exit(code);
    }
    let listen = std::env::var("LISTEN").unwrap_or_else(|_| {
        format!(
            "{}:8080",
            std::env::var("POD_IP").unwrap_or_else(|_| "127.0.0.1".into())
        )
    });
    let listener = match TcpListener::bind(&listen) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("listening on {listen}: {e}");
            std::process::exit(1);
        }
    };
    println!("testapp serving on {listen}");
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { continue };
        let mut line = String::new();
        let mut reader = BufReader::new(&stream);
        if reader.read_line(&mut line).is_err() {
            continue;
        }
        // Read the headers too: closing with unread input would reset the connection.
        let mut header = String::new();
        while reader.read_line(&mut header).is_ok_and(|n| n > 2) {
            header.clear();
        }
        let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
        let (code, body) = if let Some(p) = path.strip_prefix("/file?path=") {
            match std::fs::read_to_string(p) {
                Ok(s) => (200, s),
                Err(e) => (404, e.to_string()),
            }
        } else if path == "/fail" {
            FAILING.store(true, Ordering::Relaxed);
            (200, "failing from now on".to_string())
        } else if path == "/healthz" && FAILING.load(Ordering::Relaxed) {
            (500, "unhealthy".to_string())
        } else {
            (200, hostname.clone())
        };
        let _ = write!(
            stream,
            "HTTP/1.0 {code} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
    }
}
