//! Source and breakpoints in `stepctl debug`: `list`, `b`, `clear`,
//! `info breakpoints`, and `until`'s target line.

use std::path::Path;

use stepd_proto::v1::{
    AddBreakpointRequest, Breakpoint, BreakpointSpec, FunctionLocation, HereCommand,
    RemoveBreakpointRequest, SourceLocation, breakpoint_service_client::BreakpointServiceClient,
    breakpoint_spec::Location, debug_command::Command,
};

use super::Debugger;
use crate::{
    cmd::breakpoints,
    colour,
    connect::client,
    render::{self, breakpoints::describe_location},
};

/// Lines `list` shows at a time.
const LIST_LINES: u32 = 11;

/// Line `line` (1-based) of a file, when it can be read.
pub fn line_text(path: &str, line: u32) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .nth(line.checked_sub(1)? as usize)
        .map(|l| l.trim_end().to_owned())
}

/// A FILE as typed: absolute, else found from the working directory, else
/// beside the stopped file; from the working directory when neither has it.
fn resolve(file: &str, beside: Option<&str>) -> String {
    let path = Path::new(file);
    if path.is_absolute() {
        return file.to_owned();
    }
    let cwd = std::env::current_dir().unwrap_or_default();
    let from_cwd = cwd.join(path);
    if !from_cwd.exists()
        && let Some(dir) = beside.and_then(|b| Path::new(b).parent())
        && dir.join(path).exists()
    {
        return dir.join(path).display().to_string();
    }
    from_cwd.display().to_string()
}

/// Where a command points: a line in a file, or a function.
enum Place {
    Line(String, u32),
    Function(String),
}

impl Debugger {
    /// The selected frame's file and line (the pause's at frame 0).
    async fn here(&mut self) -> Option<(String, u32)> {
        let location = match self.selected_frame().await {
            Ok(Some((_, frame))) => frame.location,
            _ => self.current_pause().and_then(|p| p.location.clone()),
        }?;
        (!location.path.is_empty()).then_some((location.path, location.line))
    }

    /// Parses LINE, FILE:LINE or FUNC.
    async fn place(&mut self, text: &str) -> Result<Place, String> {
        let here = self.here().await;
        if let Ok(line) = text.parse::<u32>() {
            let (path, _) = here.ok_or("no stopped file to take LINE in; give FILE:LINE")?;
            return Ok(Place::Line(path, line));
        }
        if let Some((file, line)) = text.rsplit_once(':')
            && let Ok(line) = line.parse::<u32>()
        {
            let beside = here.as_ref().map(|(p, _)| p.as_str());
            return Ok(Place::Line(resolve(file, beside), line));
        }
        Ok(Place::Function(text.to_owned()))
    }

    /// `list`, `list N`, `list FILE:N`.
    pub(super) async fn list(&mut self, arg: Option<&str>) {
        let here = self.here().await;
        let (path, first) = match arg {
            None => match (&self.view.list_next, &here) {
                (Some((path, next)), _) => (path.clone(), *next),
                (None, Some((path, line))) => (path.clone(), line.saturating_sub(LIST_LINES / 2)),
                (None, None) => return self.error("no stopped file; give FILE:LINE"),
            },
            Some(text) => match self.place(text).await {
                Ok(Place::Line(path, line)) => (path, line.saturating_sub(LIST_LINES / 2)),
                Ok(Place::Function(_)) => {
                    return self.error(&format!("list takes LINE or FILE:LINE, not {text:?}"));
                }
                Err(message) => return self.error(&message),
            },
        };
        let first = first.max(1);
        // The file where stepctl runs, else the excerpt the daemon sent with
        // the stop (a daemon on another machine).
        let (source, offset) = match std::fs::read_to_string(&path) {
            Ok(source) => (source, 0),
            Err(err) => match self.excerpt_of(&path) {
                Some((first_line, text)) => (text, first_line - 1),
                None => return self.error(&format!("cannot read {path}: {err}")),
            },
        };
        let lines: Vec<&str> = std::iter::repeat_n("", offset as usize)
            .chain(source.lines())
            .collect();
        if first as usize > lines.len() {
            return self.error(&format!(
                "line {first} is past the end of {path} ({} lines)",
                lines.len()
            ));
        }
        let last = (first + LIST_LINES - 1).min(lines.len() as u32);
        let current = here.filter(|(p, _)| *p == path).map(|(_, l)| l);
        self.show_range(&lines, first, last, current);
        self.view.list_next = Some((path, last + 1));
    }

    /// `ll`: the selected frame's function, whole, its current line marked.
    pub(super) async fn long_list(&mut self) {
        let frame = match self.selected_frame().await {
            Ok(Some((_, frame))) => frame,
            Ok(None) => return self.error("no pause pending: the program is running"),
            Err(message) => return self.error(&message),
        };
        let location = frame.location.clone().unwrap_or_default();
        let source = match std::fs::read_to_string(&location.path) {
            Ok(source) => source,
            Err(err) => return self.error(&format!("cannot read {}: {err}", location.path)),
        };
        let lines: Vec<&str> = source.lines().collect();
        let (first, last) =
            function_lines(&lines, location.line, &frame.name).unwrap_or((1, lines.len() as u32));
        self.show_range(&lines, first, last, Some(location.line));
        self.view.list_next = Some((location.path, last + 1));
    }

    /// Lines `first..=last` (1-based) with their numbers, `current` marked.
    fn show_range(&mut self, lines: &[&str], first: u32, last: u32, current: Option<u32>) {
        let width = last.to_string().len();
        let mut out = Vec::new();
        for n in first..=last {
            let text = lines[n as usize - 1];
            let marker = if Some(n) == current { "->" } else { "  " };
            let line = format!("{marker} {n:>width$} | {text}")
                .trim_end()
                .to_owned();
            out.push(if Some(n) == current {
                colour::current(&line)
            } else {
                line
            });
        }
        self.say(out);
    }

    /// The current pause's excerpt of `path`: its first line and its text.
    fn excerpt_of(&self, path: &str) -> Option<(u32, String)> {
        let location = self.current_pause()?.location.as_ref()?;
        let excerpt = location.excerpt.as_ref()?;
        (location.path == path && excerpt.first_line > 0)
            .then(|| (excerpt.first_line, excerpt.lines.join("\n")))
    }

    /// `b [--global] FILE:LINE|LINE|FUNC [if COND]`, and `tbreak`: at most one
    /// hit, deleted when it stops here.
    pub(super) async fn add_breakpoint(
        &mut self,
        location: &str,
        condition: &str,
        global: bool,
        temporary: bool,
    ) {
        let location = match self.place(location).await {
            Ok(Place::Line(path, line)) => Location::Source(SourceLocation {
                path,
                line,
                column: 0,
            }),
            Ok(Place::Function(name)) => Location::Function(FunctionLocation { name }),
            Err(message) => return self.error(&message),
        };
        let label_selector = if global {
            String::new()
        } else {
            self.scope.selector()
        };
        let spec = BreakpointSpec {
            location: Some(location),
            condition: condition.to_owned(),
            max_hits: u32::from(temporary),
            label_selector,
            ..Default::default()
        };
        let added = client!(BreakpointServiceClient, self.channel.clone())
            .add_breakpoint(AddBreakpointRequest { spec: Some(spec) })
            .await;
        match added {
            Ok(r) => {
                let bp = r.into_inner().breakpoint.unwrap_or_default();
                let when = if condition.is_empty() {
                    String::new()
                } else {
                    format!(" if {condition}")
                };
                let (kind, whose) = (
                    if temporary {
                        "temporary breakpoint"
                    } else {
                        "breakpoint"
                    },
                    self.scope.whose(global),
                );
                self.print(format!(
                    "{kind} {} at {}{when} ({whose})",
                    bp.id,
                    colour::location(&describe_location(&bp))
                ));
                if temporary {
                    self.scope.temporary.insert(bp.id.clone());
                }
                if !global {
                    self.scope.own.insert(bp.id.clone());
                }
                self.added.insert(bp.id);
            }
            Err(status) => self.error(&format!("error: {}", status.message())),
        }
    }

    pub(super) async fn all_breakpoints(&mut self) -> Option<Vec<Breakpoint>> {
        let mut client = client!(BreakpointServiceClient, self.channel.clone());
        match breakpoints::all(&mut client).await {
            Ok(all) => Some(all),
            Err(status) => {
                self.error(&format!("error: {}", status.message()));
                None
            }
        }
    }

    /// `clear ID|FILE:LINE|LINE|FUNC`, or `clear`: those on the current line.
    pub(super) async fn clear(&mut self, arg: Option<&str>) {
        let place = match arg {
            Some(id) if id.starts_with("bp-") => {
                let removed = client!(BreakpointServiceClient, self.channel.clone())
                    .remove_breakpoint(RemoveBreakpointRequest { id: id.to_owned() })
                    .await;
                return match removed {
                    Ok(_) => self.print(format!("deleted {id}")),
                    Err(status) => self.error(&format!("error: {}", status.message())),
                };
            }
            Some(text) => match self.place(text).await {
                Ok(place) => place,
                Err(message) => return self.error(&message),
            },
            None => match self.here().await {
                Some((path, line)) => Place::Line(path, line),
                None => return self.error("no stopped line; give FILE:LINE"),
            },
        };
        let Some(all) = self.all_breakpoints().await else {
            return;
        };
        let matching: Vec<String> = all
            .iter()
            .filter(
                |bp| match (bp.spec.as_ref().and_then(|s| s.location.as_ref()), &place) {
                    (Some(Location::Source(s)), Place::Line(path, line)) => {
                        s.path == *path && s.line == *line
                    }
                    (Some(Location::Function(f)), Place::Function(name)) => f.name == *name,
                    _ => false,
                },
            )
            .map(|bp| bp.id.clone())
            .collect();
        if matching.is_empty() {
            let what = match &place {
                Place::Line(path, line) => format!("{path}:{line}"),
                Place::Function(name) => format!("function {name}"),
            };
            return self.error(&format!("no breakpoint at {what}"));
        }
        for id in matching {
            let removed = client!(BreakpointServiceClient, self.channel.clone())
                .remove_breakpoint(RemoveBreakpointRequest { id: id.clone() })
                .await;
            match removed {
                Ok(_) => self.print(format!("deleted {id}")),
                Err(status) => self.error(&format!("error: {}", status.message())),
            }
        }
    }

    /// `info breakpoints`: those that apply to this session.
    pub(super) async fn info_breakpoints(&mut self) {
        let Some(all) = self.session_breakpoints().await else {
            return;
        };
        if all.is_empty() {
            self.print("no breakpoints".into());
        } else {
            self.print(render::breakpoints::table_text(&all));
        }
    }

    /// `until LINE`, or `until` (the line after the current one), as pdb
    /// and gdb have it: stop at the first line at or after LINE in this
    /// frame, or when the frame returns; a breakpoint on the way stops first.
    pub(super) fn until_target(&self, line: Option<u32>) -> Result<Command, String> {
        let pause = self
            .current_pause()
            .ok_or("no pause pending: the program is running (pause pauses it)")?;
        let line = match line {
            Some(line) => line,
            None => pause.location.as_ref().map_or(0, |l| l.line) + 1,
        };
        Ok(Command::Here(HereCommand {
            coor: Vec::new(),
            path: String::new(),
            line,
            force: false,
            within_frame: true,
        }))
    }
}

fn indent(text: &str) -> usize {
    text.len() - text.trim_start().len()
}

/// The line (1-based) that defines the function `name` (as the adapter names
/// frames: `step`, `main.step`, `main.(*T).Move`) that holds `line`: the
/// nearest line at or above it that names the function before a `(` and is
/// indented less than `line` (or is `line`).
fn definition(lines: &[&str], line: u32, name: &str) -> Option<usize> {
    let short = name.rsplit(['.', '`', ':']).next()?.trim();
    if short.is_empty() || short.starts_with('<') {
        return None;
    }
    let at = (line as usize).checked_sub(1)?;
    let depth = indent(lines.get(at)?);
    (0..=at).rev().find(|&i| {
        let text = lines[i];
        let named = text.match_indices(short).any(|(pos, _)| {
            let before = text[..pos].chars().next_back();
            text[pos + short.len()..].trim_start().starts_with('(')
                && !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
        });
        named && (i == at || indent(text) < depth) && !text.trim_start().starts_with(['#', '/'])
    })
}

/// The first and last lines (1-based) of the function holding `line`: from
/// its definition to the last line indented deeper, with a closing brace.
pub fn function_lines(lines: &[&str], line: u32, name: &str) -> Option<(u32, u32)> {
    let start = definition(lines, line, name)?;
    let depth = indent(lines[start]);
    let mut last = start;
    for (i, text) in lines.iter().enumerate().skip(start + 1) {
        if text.trim().is_empty() {
            continue;
        }
        if indent(text) <= depth {
            if text.trim_start().starts_with(['}', ')']) {
                last = i;
            }
            break;
        }
        last = i;
    }
    Some((start as u32 + 1, last as u32 + 1))
}

/// The parameter names of the function holding `line` of `path`, read from
/// its signature; `None` when the source or the signature cannot be read.
pub fn parameters(path: &str, line: u32, name: &str) -> Option<Vec<String>> {
    let source = std::fs::read_to_string(path).ok()?;
    let lines: Vec<&str> = source.lines().collect();
    let start = definition(&lines, line, name)?;
    let short = name.rsplit(['.', '`', ':']).next()?.trim();
    let text = lines[start..].join("\n");
    let open = text.find(&format!("{short}("))? + short.len() + 1;
    let mut depth = 0;
    let mut params = Vec::new();
    let mut current = String::new();
    for c in text[open..].chars() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' if depth == 0 => break,
            ')' | ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                params.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    params.push(current);
    let go = path.ends_with(".go");
    let python = path.ends_with(".py");
    Some(
        params
            .iter()
            .map(|p| p.trim())
            .filter(|p| !p.is_empty() && *p != "*" && *p != "/" && *p != "void")
            .filter_map(|p| {
                let p = p.split('=').next()?.trim();
                let word = if p.contains(':') || python {
                    p.split(':').next()?.trim()
                } else if go {
                    p.split_whitespace().next()?
                } else {
                    p.split_whitespace().next_back()?
                };
                let word = word
                    .trim_start_matches(['*', '&'])
                    .trim_start_matches("mut ")
                    .split('[')
                    .next()?
                    .trim();
                (!word.is_empty()).then(|| word.to_owned())
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params_of(name: &str, file: &str, text: &str, line: u32) -> Option<Vec<String>> {
        let dir = std::env::temp_dir().join(format!("stepctl-params-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(file);
        std::fs::write(&path, text).unwrap();
        parameters(path.to_str().unwrap(), line, name)
    }

    #[test]
    fn parameters_are_read_from_the_signature() {
        let python = "def other(x):\n    pass\n\ndef step(self, i: int, *rest, total=0, **kw):\n    step(1)\n    return i\n";
        assert_eq!(
            params_of("step", "a.py", python, 6).unwrap(),
            ["self", "i", "rest", "total", "kw"]
        );
        let go = "package main\n\nfunc (p *Point) Move(dx, dy int, names ...string) int {\n\tMove(1)\n\treturn dx\n}\n";
        assert_eq!(
            params_of("main.(*Point).Move", "a.go", go, 5).unwrap(),
            ["dx", "dy", "names"]
        );
        let c = "static int step(int i, const char *name[]) {\n    return i;\n}\n";
        assert_eq!(params_of("step", "a.c", c, 2).unwrap(), ["i", "name"]);
        assert_eq!(
            params_of("main", "b.c", "int main(void) {\n  return 0;\n}\n", 2).unwrap(),
            Vec::<String>::new()
        );
        assert!(params_of("<module>", "b.py", "x = 1\n", 1).is_none());
    }

    #[test]
    fn a_function_runs_from_its_definition_to_its_last_indented_line() {
        let python = [
            "def step(i):",
            "    x = i",
            "",
            "    return x",
            "",
            "def main():",
            "    step(1)",
        ];
        assert_eq!(function_lines(&python, 4, "step"), Some((1, 4)));
        assert_eq!(function_lines(&python, 7, "main"), Some((6, 7)));
        let go = [
            "func step(i int) int {",
            "\tif i > 0 {",
            "\t\treturn i",
            "\t}",
            "\treturn 0",
            "}",
            "",
            "func main() {}",
        ];
        assert_eq!(function_lines(&go, 3, "main.step"), Some((1, 6)));
    }
}
