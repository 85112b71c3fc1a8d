//! The line editor of stepctl's interactive loops (`debug`, `inspect`): on a
//! terminal, rustyline with history and tab completion, messages printed above
//! the prompt; otherwise plain lines from stdin, read one at a time when asked.

use std::{
    collections::HashMap,
    io::{BufRead, IsTerminal, Write},
    path::PathBuf,
    sync::{Arc, Mutex, mpsc as std_mpsc},
    time::{Duration, Instant},
};

use rustyline::{
    Config, Context, Editor, ExternalPrinter, Helper,
    completion::{Completer, FilenameCompleter, Pair},
    error::ReadlineError,
    highlight::Highlighter,
    hint::Hinter,
    history::FileHistory,
    validate::Validator,
};
use tokio::sync::mpsc;

/// One line from the terminal (or stdin).
pub enum Input {
    Line(String),
    Interrupted,
    Eof,
}

/// What Tab completes in a loop.
#[derive(Clone, Default)]
pub struct Vocabulary {
    /// Command words, completed as the first word.
    pub commands: Vec<String>,
    /// Commands whose argument is a file path (`list`, `break`).
    pub path_commands: Vec<String>,
    /// Fixed argument words of some commands (`info` → `locals`, …).
    pub arguments: HashMap<String, Vec<String>>,
    /// Names completed in other arguments (the locals of the stop); the loop
    /// keeps them current.
    pub names: Arc<Mutex<Vec<String>>>,
}

/// Where a loop keeps its history: `$ENV_VAR` (empty: nowhere), else
/// `$XDG_STATE_HOME/stepd/FILE`, else `~/.local/state/stepd/FILE`.
#[derive(Clone, Copy)]
pub struct History {
    pub env_var: &'static str,
    pub file: &'static str,
}

impl History {
    fn path(self) -> Option<PathBuf> {
        if let Some(path) = std::env::var_os(self.env_var) {
            return (!path.is_empty()).then(|| PathBuf::from(path));
        }
        let base = std::env::var_os("XDG_STATE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))?;
        Some(base.join("stepd").join(self.file))
    }
}

/// How long a program's unfinished line waits for the rest before it is
/// shown on its own (a prompt the program printed, say).
pub const PARTIAL_LINE_WAIT: Duration = Duration::from_millis(50);

/// Line input, and output that does not disturb the line being typed.
pub struct Terminal {
    ask: std_mpsc::Sender<String>,
    pub lines: mpsc::UnboundedReceiver<Input>,
    printer: Option<Box<dyn ExternalPrinter + Send>>,
    saved: Option<libc::termios>,
    pub interactive: bool,
    /// A line has been asked for and not yet received.
    pub asked: bool,
    /// On a terminal: program output after its last newline, held until the
    /// line is complete (the printer ends every message with a newline).
    partial: String,
    /// When `partial` began.
    partial_since: Option<Instant>,
    /// Off a terminal: the last output did not end its line.
    line_open: bool,
}

impl Terminal {
    pub fn start(history: History, vocabulary: Vocabulary) -> Self {
        let interactive = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
        let (ask, asks) = std_mpsc::channel::<String>();
        let (line_tx, lines) = mpsc::unbounded_channel();
        let mut saved = None;
        let mut printer = None;
        if interactive {
            // rustyline restores the terminal when readline returns; stepctl
            // may leave while a readline is in progress, so keep the mode to
            // restore it then.
            let mut termios = std::mem::MaybeUninit::<libc::termios>::uninit();
            // SAFETY: tcgetattr fills the struct when it returns 0.
            if unsafe { libc::tcgetattr(0, termios.as_mut_ptr()) } == 0 {
                // SAFETY: initialised by the successful call above.
                saved = Some(unsafe { termios.assume_init() });
            }
            let (printer_tx, printer_rx) = std_mpsc::channel();
            std::thread::spawn(move || {
                editor_thread(history, vocabulary, asks, line_tx, printer_tx)
            });
            printer = printer_rx.recv().ok().flatten();
        } else {
            std::thread::spawn(move || {
                let stdin = std::io::stdin();
                for _ in asks {
                    let mut line = String::new();
                    let input = match stdin.lock().read_line(&mut line) {
                        Ok(0) | Err(_) => Input::Eof,
                        Ok(_) => Input::Line(line.trim_end_matches(['\n', '\r']).to_owned()),
                    };
                    if line_tx.send(input).is_err() {
                        break;
                    }
                }
            });
        }
        Self {
            ask,
            lines,
            printer,
            saved,
            interactive,
            asked: false,
            partial: String::new(),
            partial_since: None,
            line_open: false,
        }
    }

    /// Asks for the next line, showing `prompt` on a terminal.
    pub fn ask(&mut self, prompt: &str) {
        if !self.asked {
            self.asked = self.ask.send(prompt.to_owned()).is_ok();
        }
    }

    /// The line asked for; `None` when no line was asked for or input is gone.
    pub async fn line(&mut self) -> Option<Input> {
        if !self.asked {
            return None;
        }
        let input = self.lines.recv().await;
        self.asked = false;
        input
    }

    /// Asks with `prompt` and waits for the line.
    pub async fn read(&mut self, prompt: &str) -> Input {
        self.ask(prompt);
        self.line().await.unwrap_or(Input::Eof)
    }

    /// Prints a message on lines of its own.
    pub fn print(&mut self, text: &str) {
        self.flush_partial();
        match &mut self.printer {
            Some(printer) => {
                let _ = printer.print(format!("{text}\n"));
            }
            None => {
                let mut out = std::io::stdout().lock();
                if std::mem::take(&mut self.line_open) {
                    let _ = writeln!(out);
                }
                let _ = writeln!(out, "{text}");
                let _ = out.flush();
            }
        }
    }

    /// Prints program output as it arrives, without breaking lines where its
    /// chunks happen to end.
    pub fn output(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        let Some(printer) = &mut self.printer else {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(text.as_bytes());
            let _ = out.flush();
            self.line_open = !text.ends_with('\n');
            return;
        };
        self.partial.push_str(text);
        if let Some(end) = self.partial.rfind('\n') {
            let complete: String = self.partial.drain(..=end).collect();
            let _ = printer.print(complete);
        }
        self.partial_since = if self.partial.is_empty() {
            None
        } else {
            self.partial_since.or_else(|| Some(Instant::now()))
        };
    }

    /// When a held unfinished line is due to be shown.
    pub fn partial_due(&self) -> Option<Instant> {
        self.partial_since.map(|since| since + PARTIAL_LINE_WAIT)
    }

    /// Shows a held unfinished line now.
    pub fn flush_partial(&mut self) {
        self.partial_since = None;
        if self.partial.is_empty() {
            return;
        }
        let text = std::mem::take(&mut self.partial);
        if let Some(printer) = &mut self.printer {
            let _ = printer.print(text);
        }
    }

    /// Prints the last words (if any) and gives the terminal back as it was.
    pub fn finish(mut self, last: &str) {
        self.flush_partial();
        let Some(mut printer) = self.printer.take() else {
            if self.line_open {
                println!();
            }
            if !last.is_empty() {
                println!("{last}");
            }
            return;
        };
        if !last.is_empty() {
            let _ = printer.print(format!("{last}\n"));
        }
        if self.asked {
            // The printer hands messages to the editor thread one at a time;
            // once two more were taken, the last words are on the screen.
            let _ = printer.print(String::new());
            let _ = printer.print(String::new());
            // The editor is still in its readline: silence it, then erase the
            // prompt it drew again.
            // SAFETY: plain descriptor operations on stdout; `tty` is ours.
            unsafe {
                let tty = libc::dup(1);
                let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY);
                if tty >= 0 && null >= 0 {
                    libc::dup2(null, 1);
                    let erase = b"\r\x1b[K";
                    libc::write(tty, erase.as_ptr().cast(), erase.len());
                }
            }
        }
        if let Some(saved) = &self.saved {
            // SAFETY: restores attributes read from the same descriptor.
            unsafe { libc::tcsetattr(0, libc::TCSANOW, saved) };
        }
    }
}

/// Tab completion over a [`Vocabulary`].
struct Completion {
    vocabulary: Vocabulary,
    files: FilenameCompleter,
}

fn pairs<'a>(words: impl IntoIterator<Item = &'a String>, prefix: &str) -> Vec<Pair> {
    let mut found: Vec<Pair> = words
        .into_iter()
        .filter(|w| w.starts_with(prefix))
        .map(|w| Pair {
            display: w.clone(),
            replacement: w.clone(),
        })
        .collect();
    found.sort_by(|a, b| a.display.cmp(&b.display));
    found.dedup_by(|a, b| a.display == b.display);
    found
}

impl Completion {
    fn candidates(&self, line: &str, pos: usize) -> (usize, Vec<Pair>) {
        let before = &line[..pos];
        let Some((command, _)) = before.trim_start().split_once(char::is_whitespace) else {
            let start = before.len() - before.trim_start().len();
            let mut found = pairs(&self.vocabulary.commands, before.trim_start());
            // A whole command word is followed by its argument.
            for pair in &mut found {
                pair.replacement.push(' ');
            }
            return (start, found);
        };
        if self.vocabulary.path_commands.iter().any(|c| c == command) {
            let history = FileHistory::new();
            let ctx = Context::new(&history);
            return self
                .files
                .complete(line, pos, &ctx)
                .unwrap_or((pos, Vec::new()));
        }
        // Names end at anything that cannot be part of an identifier.
        let start = before
            .char_indices()
            .rev()
            .find(|(_, c)| !(c.is_alphanumeric() || *c == '_'))
            .map_or(0, |(i, c)| i + c.len_utf8());
        let word = &before[start..];
        if let Some(fixed) = self.vocabulary.arguments.get(command) {
            return (start, pairs(fixed, word));
        }
        let names = self
            .vocabulary
            .names
            .lock()
            .map(|n| n.clone())
            .unwrap_or_default();
        (start, pairs(&names, word))
    }
}

impl Completer for Completion {
    type Candidate = Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        Ok(self.candidates(line, pos))
    }
}

impl Hinter for Completion {
    type Hint = String;
}
impl Highlighter for Completion {}
impl Validator for Completion {}
impl Helper for Completion {}

/// Runs rustyline: one readline per prompt received, its result sent back.
fn editor_thread(
    history: History,
    vocabulary: Vocabulary,
    asks: std_mpsc::Receiver<String>,
    lines: mpsc::UnboundedSender<Input>,
    printer_tx: std_mpsc::Sender<Option<Box<dyn ExternalPrinter + Send>>>,
) {
    let config = Config::builder()
        .auto_add_history(false)
        .max_history_size(1000)
        .map(|b| b.completion_type(rustyline::CompletionType::List).build())
        .unwrap_or_default();
    let mut editor = match Editor::<Completion, FileHistory>::with_config(config) {
        Ok(editor) => editor,
        Err(_) => {
            let _ = printer_tx.send(None);
            return;
        }
    };
    editor.set_helper(Some(Completion {
        vocabulary,
        files: FilenameCompleter::new(),
    }));
    let printer = editor
        .create_external_printer()
        .ok()
        .map(|p| Box::new(p) as Box<dyn ExternalPrinter + Send>);
    let _ = printer_tx.send(printer);
    let history = history.path();
    if let Some(path) = &history {
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let _ = editor.load_history(path);
    }
    for prompt in asks {
        let input = match editor.readline(&prompt) {
            Ok(line) => {
                let trimmed = line.trim();
                if !trimmed.is_empty() && trimmed != "!!" {
                    let _ = editor.add_history_entry(trimmed);
                    if let Some(path) = &history {
                        let _ = editor.append_history(path);
                    }
                }
                Input::Line(line)
            }
            Err(ReadlineError::Interrupted) => Input::Interrupted,
            Err(_) => Input::Eof,
        };
        if lines.send(input).is_err() {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn completion() -> Completion {
        let vocabulary = Vocabulary {
            commands: ["print", "p", "pauses", "list", "info"]
                .map(String::from)
                .to_vec(),
            path_commands: vec!["list".into()],
            arguments: HashMap::from([(
                "info".to_owned(),
                vec!["locals".to_owned(), "breakpoints".to_owned()],
            )]),
            names: Arc::new(Mutex::new(vec!["total".into(), "items".into()])),
        };
        Completion {
            vocabulary,
            files: FilenameCompleter::new(),
        }
    }

    fn words(found: (usize, Vec<Pair>)) -> (usize, Vec<String>) {
        (
            found.0,
            found.1.into_iter().map(|p| p.replacement).collect(),
        )
    }

    #[test]
    fn completes_commands_arguments_and_names() {
        let c = completion();
        assert_eq!(
            words(c.candidates("pa", 2)),
            (0, vec!["pauses ".to_owned()])
        );
        assert_eq!(
            words(c.candidates("p", 1)),
            (0, vec!["p ".to_owned(), "pauses ".into(), "print ".into()])
        );
        assert_eq!(
            words(c.candidates("info l", 6)),
            (5, vec!["locals".to_owned()])
        );
        assert_eq!(
            words(c.candidates("p items[0] + to", 15)),
            (13, vec!["total".to_owned()])
        );
    }
}
