//! The log events of large phases carry the seed log's names and fields.

use std::io::Write;
use std::sync::{Arc, Mutex};

use ipu_exchange::generate::{GenConfig, generate_phase};
use ipu_exchange::*;

#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Write for Buffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .map_err(|_| std::io::Error::other("poisoned"))?
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn large_phases_log_the_seed_events() {
    let phase = generate_phase(&GenConfig {
        tile_count: 64,
        transfers: 1200,
        target_bound: 2000,
        max_fanout: 1,
        paired_percent: 20,
        balanced_sources: true,
        seed: 11,
    });
    // A global subscriber: a thread-local one can miss events whose
    // callsites other tests' threads hit at the same time. Other tests'
    // large phases log too; this one is told apart by its phase number.
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::set_global_default(subscriber).expect("the only global subscriber");
    let config = ScheduleConfig {
        phase_label: 7007,
        ..ScheduleConfig::default()
    };
    let s = schedule(&phase, &Fabric::ipu21().unwrap(), &config).unwrap();
    let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
    let line = |name: &str| {
        text.lines()
            .find(|l| l.contains(name) && l.contains("phase=7007 "))
            .unwrap_or_else(|| panic!("no `{name}` event in:\n{text}"))
            .to_owned()
    };
    let prepared = line("prepared large physical exchange phase");
    assert!(
        prepared.contains(&format!("transfers={}", phase.transfers.len())),
        "{prepared}"
    );
    assert!(
        prepared.contains("maximum_identical_destinations=1"),
        "{prepared}"
    );
    let compared = line("compared ordinary and paired exchange schedules");
    for field in [
        "candidates=",
        "ordinary_horizon=",
        "paired_horizon=",
        "use_paired=",
    ] {
        assert!(compared.contains(field), "{compared}");
    }
    assert!(
        compared.contains(&format!("use_paired={}", s.kind() == ScheduleKind::Paired)),
        "{compared}"
    );
    let optimized = line("optimized physical exchange schedule");
    for field in [
        "initial_horizon=",
        "selected_kind=",
        "lower_bound_gap=",
        "neighborhood_improvements=",
    ] {
        assert!(optimized.contains(field), "{optimized}");
    }
    assert!(
        optimized.contains(&format!("selected_horizon={}", s.horizon())),
        "{optimized}"
    );
    assert!(
        optimized.contains(&format!(
            "endpoint_lower_bound={}",
            s.endpoint_lower_bound()
        )),
        "{optimized}"
    );
    let finished = line("finished large physical exchange phase");
    let (tile, bytes) = s.rows().largest_row().unwrap();
    assert!(
        finished.contains(&format!("tile={}", tile.as_u32())),
        "{finished}"
    );
    assert!(
        finished.contains(&format!("row_words={}", bytes / 4)),
        "{finished}"
    );
    assert!(
        finished.contains(&format!("horizon={}", s.horizon())),
        "{finished}"
    );
}
