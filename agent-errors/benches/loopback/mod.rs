//! The loopback HTTP server the streaming benches read from: every request on every connection
//! is answered with one fixed response, connections kept open, so a bench measures the client.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Answers every request on every connection with `response`, keeping connections open.
pub(crate) async fn serve(listener: TcpListener, response: &'static [u8]) {
    loop {
        let Ok((socket, _)) = listener.accept().await else {
            continue;
        };
        tokio::spawn(answer_all(socket, response));
    }
}

async fn answer_all(mut socket: TcpStream, response: &'static [u8]) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        while let Some(end) = request_end(&buf) {
            buf.drain(..end);
            if socket.write_all(response).await.is_err() {
                return;
            }
        }
        match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Where the first whole request in `buf` ends (head and `content-length` body), if it is there.
fn request_end(buf: &[u8]) -> Option<usize> {
    let head_end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = std::str::from_utf8(&buf[..head_end]).ok()?;
    let length = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    (buf.len() >= head_end + length).then_some(head_end + length)
}
