//! Timing GPU work with CUDA events, over CUDA-graph replays or plain launches; running a
//! launch sequence once as a CUDA graph.
//!
//! The method is the one of design §10: run the work once eagerly (checked, so a fault is
//! attributed), warm up, then time `rounds` rounds of `reps` back-to-back repetitions, each
//! round between two CUDA events, and report the per-repetition median over the rounds.
//! Graph replay removes the CPU launch overhead from the measurement, which matters for
//! kernels of a few µs.

use cudarc::driver::{sys, CudaEvent};

use crate::{Arg, Error, Gpu, Launch, Module};

/// One kernel launch, as data: what [`Gpu::time_graph`] captures.
#[derive(Debug, Clone)]
pub struct KernelCall<'a> {
    /// The module holding the kernel.
    pub module: &'a Module,
    /// The kernel's name.
    pub kernel: &'a str,
    /// Its launch geometry.
    pub launch: Launch,
    /// Its arguments, in `.param` order.
    pub args: Vec<Arg<'a>>,
}

/// Per-repetition time of a timed piece of work, µs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    /// Median over the rounds of (round time / reps), µs.
    pub median_us: f64,
    /// Fastest round's time per repetition, µs.
    pub min_us: f64,
    /// Slowest round's time per repetition, µs.
    pub max_us: f64,
    /// Number of timed rounds.
    pub rounds: u32,
    /// Repetitions per round.
    pub reps: u32,
}

impl Timing {
    /// Summarises per-repetition round times, µs. `None` when `per_rep_us` is empty.
    fn from_rounds(mut per_rep_us: Vec<f64>, reps: u32) -> Option<Timing> {
        per_rep_us.sort_by(f64::total_cmp);
        let n = per_rep_us.len();
        let median_us = match n {
            0 => return None,
            n if n % 2 == 1 => per_rep_us[n / 2],
            n => (per_rep_us[n / 2 - 1] + per_rep_us[n / 2]) / 2.0,
        };
        Some(Timing {
            median_us,
            min_us: per_rep_us[0],
            max_us: per_rep_us[n - 1],
            rounds: u32::try_from(n).unwrap_or(u32::MAX),
            reps,
        })
    }
}

impl Gpu {
    /// Times the launch sequence `calls` as one CUDA graph: captured once, replayed `reps`
    /// times per round for a warm-up round and `rounds` timed rounds. See [`Timing`].
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `calls` is empty or `rounds`/`reps` is 0; any error of
    /// [`Module::launch`] from the eager first run; [`Error::Driver`] if capture, replay or
    /// the events fail.
    pub fn time_graph(
        &self,
        calls: &[KernelCall<'_>],
        rounds: u32,
        reps: u32,
    ) -> Result<Timing, Error> {
        if calls.is_empty() {
            return Err(Error::InvalidArgument("no kernels to time".to_owned()));
        }
        self.time_graph_with(rounds, reps, || run_calls(calls))
    }

    /// Like [`Gpu::time_graph`], for any work `enqueue` queues on this GPU's stream (kernel
    /// launches, [`crate::Blas`] calls, device copies). `enqueue` is called once eagerly and
    /// once under stream capture; it must not synchronize or download.
    ///
    /// # Errors
    /// As [`Gpu::time_graph`], plus whatever `enqueue` returns.
    pub fn time_graph_with(
        &self,
        rounds: u32,
        reps: u32,
        mut enqueue: impl FnMut() -> Result<(), Error>,
    ) -> Result<Timing, Error> {
        check_counts(rounds, reps)?;
        // Eager run, checked: faults and bad arguments are reported here, against the kernel.
        enqueue()?;
        self.synchronize()?;

        let graph = self.capture(enqueue)?;
        let replay = || -> Result<(), Error> {
            for _ in 0..reps {
                graph
                    .launch()
                    .map_err(Error::driver("launching the graph"))?;
            }
            Ok(())
        };
        replay()?;
        self.synchronize()?;
        self.time_rounds(rounds, reps, replay)
    }

    /// Runs `calls` once as one CUDA graph and waits for it: the launches as a program runs
    /// them in production, kernels overlapping where their launches allow it (a programmatic
    /// launch, [`Launch::programmatic`], becomes a programmatic edge of the graph), with no
    /// eager run before. `tessel check` runs a program this way after its checked run and
    /// requires the same bits, so what only overlapped kernels can get wrong (a load placed
    /// before `griddepcontrol.wait` that the kernel ahead still writes) is caught there.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `calls` is empty; [`Error::Driver`] if capture, the
    /// launch, or the kernels fail (a fault is reported at the synchronize, against no
    /// particular kernel: run the calls checked to name it).
    pub fn run_graph(&self, calls: &[KernelCall<'_>]) -> Result<(), Error> {
        if calls.is_empty() {
            return Err(Error::InvalidArgument("no kernels to run".to_owned()));
        }
        // Functions looked up and shared-memory limits raised before the capture, not in it.
        for c in calls {
            c.module.prepare(c.kernel, c.launch, &c.args)?;
        }
        let graph = self.capture(|| run_calls(calls))?;
        graph
            .launch()
            .map_err(Error::driver("launching the graph"))?;
        self.synchronize()
    }

    /// What `enqueue` queues on this GPU's stream, captured (checked mode off) into a CUDA
    /// graph, instantiated and uploaded. `enqueue` must not synchronize or download.
    fn capture(
        &self,
        enqueue: impl FnOnce() -> Result<(), Error>,
    ) -> Result<cudarc::driver::CudaGraph, Error> {
        let stream = self.stream();
        let graph = self.unchecked(|| -> Result<_, Error> {
            stream
                .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
                .map_err(Error::driver("beginning stream capture"))?;
            let queued = enqueue();
            // Always end the capture, so the stream is usable again whatever happened.
            let captured = stream.end_capture(sys::CUgraphInstantiate_flags(0));
            queued?;
            captured.map_err(Error::driver("ending stream capture"))
        })?;
        let graph = graph.ok_or_else(|| {
            Error::InvalidArgument("the work queued nothing on the stream".to_owned())
        })?;
        graph
            .upload()
            .map_err(Error::driver("uploading the graph"))?;
        Ok(graph)
    }

    /// Times `calls` launched directly, without a graph: the fallback when capture is not
    /// possible. Includes CPU launch overhead, so short kernels read slower than with
    /// [`Gpu::time_graph`].
    ///
    /// # Errors
    /// As [`Gpu::time_graph`].
    pub fn time_events(
        &self,
        calls: &[KernelCall<'_>],
        rounds: u32,
        reps: u32,
    ) -> Result<Timing, Error> {
        if calls.is_empty() {
            return Err(Error::InvalidArgument("no kernels to time".to_owned()));
        }
        self.time_events_with(rounds, reps, || run_calls(calls))
    }

    /// Like [`Gpu::time_events`], for any work `enqueue` queues on this GPU's stream.
    ///
    /// # Errors
    /// As [`Gpu::time_graph_with`].
    pub fn time_events_with(
        &self,
        rounds: u32,
        reps: u32,
        mut enqueue: impl FnMut() -> Result<(), Error>,
    ) -> Result<Timing, Error> {
        check_counts(rounds, reps)?;
        enqueue()?;
        self.synchronize()?;
        self.unchecked(|| {
            let mut repeat = || -> Result<(), Error> {
                for _ in 0..reps {
                    enqueue()?;
                }
                Ok(())
            };
            repeat()?;
            self.synchronize()?;
            self.time_rounds(rounds, reps, repeat)
        })
    }

    /// Times `rounds` calls of `round` (each doing `reps` repetitions) between events.
    fn time_rounds(
        &self,
        rounds: u32,
        reps: u32,
        mut round: impl FnMut() -> Result<(), Error>,
    ) -> Result<Timing, Error> {
        let mut per_rep_us = Vec::with_capacity(rounds as usize);
        for _ in 0..rounds {
            let start = self.record_timing_event()?;
            round()?;
            let end = self.record_timing_event()?;
            let ms = start
                .elapsed_ms(&end)
                .map_err(Error::driver("reading event times"))?;
            per_rep_us.push(f64::from(ms) * 1000.0 / f64::from(reps));
        }
        Timing::from_rounds(per_rep_us, reps)
            .ok_or_else(|| Error::InvalidArgument("no rounds timed".to_owned()))
    }

    fn record_timing_event(&self) -> Result<CudaEvent, Error> {
        // CU_EVENT_DEFAULT: timing enabled (cudarc's default disables it).
        self.stream()
            .record_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(Error::driver("recording a timing event"))
    }
}

fn run_calls(calls: &[KernelCall<'_>]) -> Result<(), Error> {
    for call in calls {
        call.module.launch(call.kernel, call.launch, &call.args)?;
    }
    Ok(())
}

fn check_counts(rounds: u32, reps: u32) -> Result<(), Error> {
    if rounds == 0 || reps == 0 {
        return Err(Error::InvalidArgument(format!(
            "timing needs rounds >= 1 and reps >= 1 (got {rounds}, {reps})"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_rounds() {
        let t = Timing::from_rounds(vec![3.0, 1.0, 2.0], 10).expect("rounds");
        assert_eq!((t.median_us, t.min_us, t.max_us), (2.0, 1.0, 3.0));
        assert_eq!((t.rounds, t.reps), (3, 10));
        let t = Timing::from_rounds(vec![4.0, 1.0, 2.0, 3.0], 1).expect("rounds");
        assert_eq!(t.median_us, 2.5);
        assert!(Timing::from_rounds(Vec::new(), 1).is_none());
    }
}
