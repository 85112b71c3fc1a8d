//! stderr written by a thread of its own, so a task that logs (an audit
//! line per answer, a session's lifecycle) never waits on the pipe, journal
//! or terminal behind stderr. Lines are never dropped: when the queue is
//! full the logging task waits, exactly as a direct write would.

use std::io::Write;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use tracing_subscriber::fmt::MakeWriter;

/// Lines queued before a logging task has to wait for the writer.
const QUEUE_LINES: usize = 4096;

enum Message {
    Line(Vec<u8>),
    /// Everything queued before it is written: answer on the channel.
    Flush(SyncSender<()>),
}

/// The `MakeWriter` of the fmt layer: each event's bytes become one message.
#[derive(Clone)]
pub struct LogWriter {
    queue: SyncSender<Message>,
}

/// Writes what is still queued when dropped (at exit).
pub struct LogFlush {
    queue: SyncSender<Message>,
}

impl LogWriter {
    /// A writer and its flush guard, with the thread that drains to stderr.
    /// Without a thread (the system refused one) writes go straight to stderr.
    pub fn stderr() -> (Self, LogFlush) {
        let (queue, lines) = sync_channel(QUEUE_LINES);
        let started = std::thread::Builder::new()
            .name("stepd-log".into())
            .spawn(move || drain(lines, std::io::stderr()));
        if started.is_err() {
            eprintln!("stepd: no log thread; logging to stderr directly");
        }
        (
            Self {
                queue: queue.clone(),
            },
            LogFlush { queue },
        )
    }
}

fn drain(lines: Receiver<Message>, mut out: impl Write) {
    while let Ok(message) = lines.recv() {
        match message {
            Message::Line(bytes) => {
                let _ = out.write_all(&bytes);
            }
            Message::Flush(done) => {
                let _ = out.flush();
                let _ = done.send(());
            }
        }
    }
}

impl LogFlush {
    /// Waits until every line logged so far has been written.
    pub fn flush(&self) {
        let (done, wait) = sync_channel(1);
        if self.queue.send(Message::Flush(done)).is_ok() {
            let _ = wait.recv();
        }
    }
}

impl Drop for LogFlush {
    fn drop(&mut self) {
        self.flush();
    }
}

/// One event's bytes, sent as one message when the layer is done with it.
pub struct Line<'a> {
    bytes: Vec<u8>,
    queue: &'a SyncSender<Message>,
}

impl Write for Line<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Line<'_> {
    fn drop(&mut self) {
        if self.bytes.is_empty() {
            return;
        }
        let bytes = std::mem::take(&mut self.bytes);
        // No writer thread: the line still reaches stderr.
        if let Err(std::sync::mpsc::SendError(Message::Line(bytes))) =
            self.queue.send(Message::Line(bytes))
        {
            let _ = std::io::stderr().write_all(&bytes);
        }
    }
}

impl<'a> MakeWriter<'a> for LogWriter {
    type Writer = Line<'a>;

    fn make_writer(&'a self) -> Line<'a> {
        Line {
            bytes: Vec::with_capacity(256),
            queue: &self.queue,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_arrive_whole_and_in_order_and_flush_waits_for_them() {
        let (queue, lines) = sync_channel(2);
        let out = Shared::default();
        let sink = out.clone();
        std::thread::spawn(move || drain(lines, sink));
        let writer = LogWriter {
            queue: queue.clone(),
        };
        let flush = LogFlush { queue };
        // More lines than the queue holds: the writer waits, nothing drops.
        for n in 0..100 {
            let mut line = writer.make_writer();
            write!(line, "line ").unwrap();
            writeln!(line, "{n}").unwrap();
        }
        flush.flush();
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let expected: String = (0..100).map(|n| format!("line {n}\n")).collect();
        assert_eq!(text, expected);
    }
}
