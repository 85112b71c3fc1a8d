//! Threads in `stepctl debug` (goroutines under dlv): `threads`, `thread N`.

use stepd_proto::v1::{
    GetStackTraceRequest, ListThreadsRequest, Thread, session_service_client::SessionServiceClient,
};

use super::Debugger;
use crate::{connect::client, render::events};

/// Frames shown of a thread that has no pause of its own.
const STACK_FRAMES: u32 = 8;

impl Debugger {
    async fn list_threads(&mut self) -> Option<Vec<Thread>> {
        match client!(SessionServiceClient, self.channel.clone())
            .list_threads(ListThreadsRequest {
                session_id: self.session_id.clone(),
            })
            .await
        {
            Ok(r) => Some(r.into_inner().threads),
            Err(status) => {
                self.error(&format!("error: {}", status.message()));
                None
            }
        }
    }

    /// `threads` / `goroutines`: every thread, `*` on the current pause's.
    pub(super) async fn threads(&mut self) {
        let Some(threads) = self.list_threads().await else {
            return;
        };
        if threads.is_empty() {
            return self.print("no threads".into());
        }
        let current = self.current_pause().map(|p| p.thread_id);
        let lines = threads
            .iter()
            .map(|t| {
                let mark = if Some(t.id) == current { "*" } else { " " };
                let state = match (t.stopped, t.pause_key.is_empty()) {
                    (true, false) => format!("stopped, pause {}", t.pause_key),
                    (true, true) => "stopped".to_owned(),
                    (false, _) => "running".to_owned(),
                };
                format!("{mark} thread {}  {}  ({state})", t.id, t.name)
            })
            .collect();
        self.say(lines);
    }

    /// `thread N`: commands go to N's pause; a thread stopped without one
    /// shows its stack. Alone: the current thread.
    pub(super) async fn thread(&mut self, id: Option<i64>) {
        let Some(id) = id else {
            let line = match self.current_pause() {
                Some(p) => format!("thread {} (pause {})", p.thread_id, p.key),
                None => "no pause pending: the program is running (pause pauses it)".to_owned(),
            };
            return self.print(line);
        };
        if let Some(key) = self
            .pending
            .iter()
            .find(|p| p.thread_id == id)
            .map(|p| p.key.clone())
        {
            return self.switch(&key);
        }
        let Some(threads) = self.list_threads().await else {
            return;
        };
        let Some(thread) = threads.into_iter().find(|t| t.id == id) else {
            return self.error(&format!("no thread {id} (threads lists them)"));
        };
        let frames = client!(SessionServiceClient, self.channel.clone())
            .get_stack_trace(GetStackTraceRequest {
                session_id: self.session_id.clone(),
                thread_id: id,
                start_frame: 0,
                levels: STACK_FRAMES,
            })
            .await;
        // An adapter may stop every thread (dlv) while stepd counts only the
        // one that reported the stop as stopped: ask for the stack anyway.
        let frames = match frames {
            Ok(r) => r.into_inner().frames,
            Err(status) if !thread.stopped => {
                return self.error(&format!(
                    "thread {id} runs ({}): it has no pause to send commands to \
                     (pause pauses the program)",
                    status.message()
                ));
            }
            Err(status) => return self.error(&format!("error: {}", status.message())),
        };
        let mut lines = vec![format!(
            "thread {id} ({}) is stopped without a pause of its own: commands still go to the \
             stopped thread; its stack:",
            thread.name
        )];
        lines.extend(
            frames
                .iter()
                .enumerate()
                .map(|(i, f)| events::frame_line(i, f, false)),
        );
        self.say(lines);
    }
}
