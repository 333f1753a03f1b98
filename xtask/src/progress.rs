//! The one status line a task keeps on a terminal while it works: the
//! build phase (a `phase{phase=...}` span) or other named activity open
//! for more than a second with its elapsed time, or, for work counted in
//! steps (the tile model's run), the steps done of all, the elapsed time
//! and an estimate of the time left.
//!
//! The line is drawn on stderr by a thread that redraws it four times a
//! second, and cleared before any log line is written (the log writer
//! goes through [`write_clearing`]) and when the work ends, so log lines
//! and the summaries that follow stay intact. It exists only when stderr
//! is a terminal and `--quiet` is not given ([`enable`]); otherwise every
//! function here does nothing, and [`steps`] gives no hook, so the tile
//! model runs without one.

use std::io::Write;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use ipu_sim::tiles::{ProgressHook, StepProgress};
use tracing::span::Id;

/// How long an activity runs before the line shows it: shorter ones would
/// only flicker.
const SHOW_AFTER: Duration = Duration::from_secs(1);

/// What the line shows, and whether it is on the screen.
#[derive(Default)]
struct State {
    /// Open activities, innermost last.
    open: Vec<Activity>,
    /// Work counted in steps, while it runs.
    steps: Option<Steps>,
    /// Whether the line is drawn now.
    shown: bool,
    /// The key of the next activity opened by [`activity`].
    next: u64,
}

/// Who opened an activity: a tracing span or an [`ActivityGuard`].
#[derive(Clone, PartialEq, Eq)]
enum Key {
    Span(Id),
    Guard(u64),
}

struct Activity {
    key: Key,
    name: String,
    since: Instant,
}

struct Steps {
    what: &'static str,
    progress: StepProgress,
    since: Instant,
}

static STATE: OnceLock<Mutex<State>> = OnceLock::new();

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // A poisoned lock only means a panic elsewhere; the state is still
    // plain data, so keep using it.
    state.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` on the state when the line is enabled.
fn with<R>(f: impl FnOnce(&mut State) -> R) -> Option<R> {
    STATE.get().map(|state| f(&mut lock(state)))
}

/// Turns the line on (call once, when stderr is a terminal) and starts the
/// thread that draws it.
pub(crate) fn enable() {
    if STATE.set(Mutex::default()).is_ok() {
        std::thread::spawn(tick);
    }
}

/// Writes `buf` to stderr, clearing the line first.
pub(crate) fn write_clearing(buf: &[u8]) -> std::io::Result<()> {
    match STATE.get() {
        Some(state) => {
            let mut s = lock(state);
            let mut err = std::io::stderr().lock();
            if s.shown {
                err.write_all(b"\r\x1b[2K")?;
                s.shown = false;
            }
            err.write_all(buf)
        }
        None => std::io::stderr().lock().write_all(buf),
    }
}

/// Clears the line if it is drawn and nothing is left to show.
fn clear_if_idle(s: &mut State) {
    if s.open.is_empty() && s.steps.is_none() && s.shown {
        // Write errors on a terminal are not worth failing a task for.
        let _ = std::io::stderr().lock().write_all(b"\r\x1b[2K");
        s.shown = false;
    }
}

/// A build phase span was entered.
pub(crate) fn span_entered(id: &Id, name: &str) {
    with(|s| {
        s.open.push(Activity {
            key: Key::Span(id.clone()),
            name: name.to_owned(),
            since: Instant::now(),
        });
    });
}

/// A build phase span was left.
pub(crate) fn span_exited(id: &Id) {
    with(|s| close(s, &Key::Span(id.clone())));
}

fn close(s: &mut State, key: &Key) {
    if let Some(i) = s.open.iter().rposition(|a| a.key == *key) {
        s.open.remove(i);
    }
    clear_if_idle(s);
}

/// Shows `name` with its elapsed time while the guard lives.
#[must_use = "the activity ends when the guard is dropped"]
pub(crate) struct ActivityGuard(Option<u64>);

/// Opens an activity named `name` (e.g. the reference evaluation).
pub(crate) fn activity(name: &str) -> ActivityGuard {
    ActivityGuard(with(|s| {
        let key = s.next;
        s.next += 1;
        s.open.push(Activity {
            key: Key::Guard(key),
            name: name.to_owned(),
            since: Instant::now(),
        });
        key
    }))
}

impl Drop for ActivityGuard {
    fn drop(&mut self) {
        if let Some(key) = self.0 {
            with(|s| close(s, &Key::Guard(key)));
        }
    }
}

/// Shows the progress of steps while the guard lives.
#[must_use = "the line is cleared when the guard is dropped"]
pub(crate) struct StepsGuard(bool);

impl Drop for StepsGuard {
    fn drop(&mut self) {
        if self.0 {
            with(|s| {
                s.steps = None;
                clear_if_idle(s);
            });
        }
    }
}

/// A hook for the tile model that shows its steps as `what` (none when
/// the line is off), and the guard that ends the display.
pub(crate) fn steps(what: &'static str) -> (Option<ProgressHook>, StepsGuard) {
    if STATE.get().is_none() {
        return (None, StepsGuard(false));
    }
    let hook = ProgressHook::new(move |progress| {
        with(|s| match &mut s.steps {
            Some(steps) => steps.progress = progress,
            None => {
                s.steps = Some(Steps {
                    what,
                    progress,
                    since: Instant::now(),
                });
            }
        });
    });
    (Some(hook), StepsGuard(true))
}

/// `m:ss`, or `h:mm:ss` from an hour on.
fn clock(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{}:{:02}", s / 60, s % 60)
    }
}

/// The line for `steps` after `elapsed`: done of all, elapsed, and the
/// time left at the mean pace so far.
fn steps_line(what: &str, p: StepProgress, elapsed: Duration) -> String {
    let percent = p
        .done
        .saturating_mul(100)
        .checked_div(p.total)
        .unwrap_or(100);
    let left = if p.done == 0 {
        "estimating".to_owned()
    } else {
        let rest = p.total.saturating_sub(p.done);
        let secs = elapsed.as_secs_f64() * rest as f64 / p.done as f64;
        format!("about {} left", clock(Duration::from_secs_f64(secs)))
    };
    format!(
        "  {what}: step {} of {} ({percent}%), {} elapsed, {left}",
        p.done,
        p.total,
        clock(elapsed)
    )
}

/// What the line shows now, if anything.
fn line(s: &State) -> Option<String> {
    if let Some(steps) = &s.steps {
        let elapsed = steps.since.elapsed();
        return (elapsed >= SHOW_AFTER).then(|| steps_line(steps.what, steps.progress, elapsed));
    }
    let a = s.open.last()?;
    let elapsed = a.since.elapsed();
    (elapsed >= SHOW_AFTER).then(|| format!("  {} … {:.1} s", a.name, elapsed.as_secs_f64()))
}

/// Redraws the line four times a second.
fn tick() {
    let Some(state) = STATE.get() else { return };
    loop {
        std::thread::sleep(Duration::from_millis(250));
        let mut s = lock(state);
        let line = line(&s);
        let mut err = std::io::stderr().lock();
        // Write errors on a terminal are not worth failing a task for.
        match line {
            Some(line) => {
                let _ = write!(err, "\r\x1b[2K{line}");
                s.shown = true;
            }
            None if s.shown => {
                let _ = write!(err, "\r\x1b[2K");
                s.shown = false;
            }
            None => {}
        }
        let _ = err.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_steps_line_says_done_of_all_elapsed_and_left() {
        let p = |done, total| StepProgress { done, total };
        let s = Duration::from_secs;
        assert_eq!(
            steps_line("tile model", p(0, 400), s(2)),
            "  tile model: step 0 of 400 (0%), 0:02 elapsed, estimating"
        );
        assert_eq!(
            steps_line("tile model", p(100, 400), s(75)),
            "  tile model: step 100 of 400 (25%), 1:15 elapsed, about 3:45 left"
        );
        assert_eq!(
            steps_line("tile model", p(1, 2), s(3700)),
            "  tile model: step 1 of 2 (50%), 1:01:40 elapsed, about 1:01:40 left"
        );
        assert_eq!(
            steps_line("x", p(0, 0), s(0)),
            "  x: step 0 of 0 (100%), 0:00 elapsed, estimating"
        );
    }
}
