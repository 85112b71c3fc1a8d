//! DAP wire format: `Content-Length: N\r\n\r\n` then N bytes of JSON. Frames
//! above the configured limit, missing headers and invalid JSON are protocol
//! errors; they end the session, never the daemon.

use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The stream ended (cleanly between frames).
    #[error("the adapter closed its output")]
    Closed,
    /// An I/O error.
    #[error("reading from the adapter: {0}")]
    Io(#[from] std::io::Error),
    /// The adapter broke the framing or sent invalid JSON.
    #[error("protocol error: {0}")]
    Protocol(String),
}

/// Longest header line accepted.
const MAX_HEADER_LINE: usize = 1024;

/// Reads one frame. `max_len` bounds the body.
pub async fn read_frame<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    max_len: usize,
) -> Result<Value, FrameError> {
    let mut length: Option<usize> = None;
    let mut line = Vec::with_capacity(64);
    let mut first = true;
    loop {
        line.clear();
        let n = (&mut *reader)
            .take(MAX_HEADER_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
            .await?;
        if n == 0 {
            return if first && length.is_none() {
                Err(FrameError::Closed)
            } else {
                Err(FrameError::Protocol("stream ended inside a header".into()))
            };
        }
        first = false;
        if line.len() > MAX_HEADER_LINE || !line.ends_with(b"\n") {
            return Err(FrameError::Protocol("header line too long".into()));
        }
        let text = std::str::from_utf8(&line)
            .map_err(|_| FrameError::Protocol("header is not UTF-8".into()))?
            .trim_end_matches(['\r', '\n']);
        if text.is_empty() {
            break;
        }
        let (name, value) = text
            .split_once(':')
            .ok_or_else(|| FrameError::Protocol(format!("malformed header {text:?}")))?;
        if name.trim().eq_ignore_ascii_case("content-length") {
            let len = value
                .trim()
                .parse::<usize>()
                .map_err(|_| FrameError::Protocol(format!("bad Content-Length {value:?}")))?;
            length = Some(len);
        }
    }
    let len = length.ok_or_else(|| FrameError::Protocol("frame without Content-Length".into()))?;
    if len > max_len {
        return Err(FrameError::Protocol(format!(
            "frame of {len} bytes exceeds the {max_len}-byte limit"
        )));
    }
    let mut body = vec![0; len];
    reader.read_exact(&mut body).await?;
    serde_json::from_slice(&body).map_err(|e| FrameError::Protocol(format!("invalid JSON: {e}")))
}

/// Writes one frame.
pub async fn write_frame<W: AsyncWrite + Unpin>(
    writer: &mut W,
    message: &Value,
) -> std::io::Result<()> {
    let body = serde_json::to_vec(message)?;
    let mut frame = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    frame.extend_from_slice(&body);
    writer.write_all(&frame).await?;
    writer.flush().await
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tokio::io::BufReader;

    use super::*;

    async fn read(bytes: &[u8], max: usize) -> Result<Value, FrameError> {
        read_frame(&mut BufReader::new(bytes), max).await
    }

    #[tokio::test]
    async fn round_trips_frames() {
        let mut buf = Vec::new();
        write_frame(&mut buf, &json!({"seq": 1, "type": "event"}))
            .await
            .unwrap();
        write_frame(&mut buf, &json!({"seq": 2})).await.unwrap();
        let mut reader = BufReader::new(buf.as_slice());
        assert_eq!(read_frame(&mut reader, 1024).await.unwrap()["seq"], 1);
        assert_eq!(read_frame(&mut reader, 1024).await.unwrap()["seq"], 2);
        assert!(matches!(
            read_frame(&mut reader, 1024).await,
            Err(FrameError::Closed)
        ));
    }

    #[tokio::test]
    async fn rejects_broken_frames() {
        for (bytes, max) in [
            (&b"Content-Length: 100\r\n\r\n{}"[..], 10),
            (b"Content-Type: x\r\n\r\n{}", 1024),
            (b"Content-Length: 2\r\n\r\nxx", 1024),
            (b"garbage\r\n\r\n", 1024),
            (b"Content-Length: 2\r\n", 1024),
        ] {
            assert!(
                matches!(
                    read(bytes, max).await,
                    Err(FrameError::Protocol(_) | FrameError::Io(_))
                ),
                "{:?}",
                String::from_utf8_lossy(bytes)
            );
        }
    }
}
