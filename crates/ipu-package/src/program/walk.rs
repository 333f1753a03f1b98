//! The one walk over a program's steps and repeats.
//!
//! Storage lifetimes, exchange shapes, support sizes, the cycle estimate
//! and package validation all read the steps in program order with each
//! repeat body once, and need to know where they are: the step's number
//! (the step numbers of lifetimes and of the profile), the exchange
//! phase's number, how often the step runs and which repeat encloses it.
//! [`Walk`] yields that as [`WalkEvent`]s, with an explicit stack instead
//! of recursion, so that a hostile package's deep nesting costs memory
//! proportional to its size and never the thread's stack.

use super::{ComputeStep, ExchangeStep, Program, RepeatStep, Step};

/// Where a walk is.
#[derive(Clone, Copy, Debug)]
pub struct At<'p> {
    /// Compute and exchange steps before this point in program order,
    /// each repeat body counted once. For [`WalkEvent::Enter`] the number
    /// of the body's first step, for [`WalkEvent::Leave`] one past its
    /// last.
    pub index: u32,
    /// Exchange steps before this point, each body counted once: an
    /// exchange step's phase number.
    pub phase: u32,
    /// Times a step here runs in one run of the program: the product of
    /// the enclosing repeats' counts (saturating). For a repeat's
    /// [`WalkEvent::Enter`] and [`WalkEvent::Leave`], the times the
    /// repeat itself starts.
    pub runs: u64,
    /// Repeats around this point (for a repeat's own events, not
    /// counting itself).
    pub depth: usize,
    /// The innermost repeat around this point (for a repeat's own events,
    /// the one around it).
    pub repeat: Option<&'p RepeatStep>,
}

/// One thing a [`Walk`] meets.
#[derive(Clone, Copy, Debug)]
pub enum WalkEvent<'p> {
    /// A compute step.
    Compute(&'p ComputeStep, At<'p>),
    /// An exchange step.
    Exchange(&'p ExchangeStep, At<'p>),
    /// A repeat whose body's events follow, then its [`WalkEvent::Leave`].
    Enter(&'p RepeatStep, At<'p>),
    /// The end of a repeat's body.
    Leave(&'p RepeatStep, At<'p>),
}

/// The steps of a program in order, each repeat body once (see the module
/// header). Made by [`Program::walk`] or [`Walk::new`].
#[derive(Debug)]
pub struct Walk<'p> {
    stack: Vec<Frame<'p>>,
    index: u32,
    phase: u32,
}

#[derive(Debug)]
struct Frame<'p> {
    steps: std::slice::Iter<'p, Step>,
    /// The repeat whose body this is (none for the top level).
    repeat: Option<&'p RepeatStep>,
    /// Times a step of this frame runs.
    runs: u64,
}

impl<'p> Walk<'p> {
    /// A walk over `steps`, counted from step 0 and phase 0.
    pub fn new(steps: &'p [Step]) -> Walk<'p> {
        Walk {
            stack: vec![Frame {
                steps: steps.iter(),
                repeat: None,
                runs: 1,
            }],
            index: 0,
            phase: 0,
        }
    }

    /// Where the walk is, for a step of the innermost open frame.
    fn here(&self) -> At<'p> {
        let top = self.stack.last();
        At {
            index: self.index,
            phase: self.phase,
            runs: top.map_or(1, |f| f.runs),
            depth: self.stack.len().saturating_sub(1),
            repeat: top.and_then(|f| f.repeat),
        }
    }
}

impl<'p> Iterator for Walk<'p> {
    type Item = WalkEvent<'p>;

    fn next(&mut self) -> Option<WalkEvent<'p>> {
        loop {
            let top = self.stack.last_mut()?;
            let Some(step) = top.steps.next() else {
                let frame = self.stack.pop()?;
                match frame.repeat {
                    Some(r) => return Some(WalkEvent::Leave(r, self.here())),
                    None => continue,
                }
            };
            let at = self.here();
            return Some(match step {
                Step::Compute(c) => {
                    self.index = self.index.saturating_add(1);
                    WalkEvent::Compute(c, at)
                }
                Step::Exchange(e) => {
                    self.index = self.index.saturating_add(1);
                    self.phase = self.phase.saturating_add(1);
                    WalkEvent::Exchange(e, at)
                }
                Step::Repeat(r) => {
                    self.stack.push(Frame {
                        steps: r.body.iter(),
                        repeat: Some(r),
                        runs: at.runs.saturating_mul(u64::from(r.count)),
                    });
                    WalkEvent::Enter(r, at)
                }
            });
        }
    }
}

impl Program {
    /// The program's steps in order, each repeat body once.
    pub fn walk(&self) -> Walk<'_> {
        Walk::new(&self.steps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::{StepLabel, StepRole};

    fn compute(name: &str) -> Step {
        Step::Compute(ComputeStep {
            label: StepLabel {
                op: None,
                role: StepRole::Add,
                name: name.to_owned(),
            },
            calls: Vec::new(),
        })
    }

    fn exchange(name: &str) -> Step {
        Step::Exchange(ExchangeStep {
            label: StepLabel {
                op: None,
                role: StepRole::Add,
                name: name.to_owned(),
            },
            copies: Vec::new(),
        })
    }

    fn repeat(name: &str, count: u32, body: Vec<Step>) -> Step {
        Step::Repeat(RepeatStep {
            name: name.to_owned(),
            count,
            body,
            iteration_buffers: Vec::new(),
        })
    }

    /// Each event as text: kind, name, index, phase, runs, depth and the
    /// enclosing repeat.
    fn trace(steps: &[Step]) -> Vec<String> {
        let at = |a: At<'_>| {
            format!(
                "@{} p{} x{} d{} in {}",
                a.index,
                a.phase,
                a.runs,
                a.depth,
                a.repeat.map_or("-", |r| r.name.as_str())
            )
        };
        Walk::new(steps)
            .map(|e| match e {
                WalkEvent::Compute(c, a) => format!("compute {} {}", c.label.name, at(a)),
                WalkEvent::Exchange(x, a) => format!("exchange {} {}", x.label.name, at(a)),
                WalkEvent::Enter(r, a) => format!("enter {} {}", r.name, at(a)),
                WalkEvent::Leave(r, a) => format!("leave {} {}", r.name, at(a)),
            })
            .collect()
    }

    #[test]
    fn a_walk_numbers_steps_and_phases_with_each_body_once() {
        let steps = vec![
            exchange("a"),
            compute("a"),
            repeat(
                "outer",
                3,
                vec![
                    exchange("b"),
                    repeat("inner", 2, vec![compute("c"), exchange("d")]),
                    compute("e"),
                ],
            ),
            repeat("empty", 4, Vec::new()),
            exchange("f"),
        ];
        assert_eq!(
            trace(&steps),
            [
                "exchange a @0 p0 x1 d0 in -",
                "compute a @1 p1 x1 d0 in -",
                "enter outer @2 p1 x1 d0 in -",
                "exchange b @2 p1 x3 d1 in outer",
                "enter inner @3 p2 x3 d1 in outer",
                "compute c @3 p2 x6 d2 in inner",
                "exchange d @4 p2 x6 d2 in inner",
                "leave inner @5 p3 x3 d1 in outer",
                "compute e @5 p3 x3 d1 in outer",
                "leave outer @6 p3 x1 d0 in -",
                "enter empty @6 p3 x1 d0 in -",
                "leave empty @6 p3 x1 d0 in -",
                "exchange f @6 p3 x1 d0 in -",
            ]
        );
    }

    #[test]
    fn deep_nesting_walks_without_recursion() {
        // Far deeper than a thread's stack would allow recursing through.
        let mut step = compute("leaf");
        for _ in 0..200_000 {
            step = repeat("r", 1, vec![step]);
        }
        let steps = vec![step];
        let events = Walk::new(&steps).count();
        assert_eq!(events, 2 * 200_000 + 1);
        // Dropping the nested steps recurses; do it on a thread with room.
        std::thread::Builder::new()
            .stack_size(256 << 20)
            .spawn(move || drop(steps))
            .expect("a thread")
            .join()
            .expect("dropped");
    }
}
