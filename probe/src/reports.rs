//! What a probe reports without holding (`Reports`: observed values,
//! enlightenings, trace records, and how many it dropped) as the events
//! clients see, and which reports are over a size limit. No I/O: the
//! session publishes what this makes.

use stepd_proto::v1::{Enlighten, Gap, Observed, Reports, Trace, TraceReport, event::Payload};

use super::value;
use stepd_core::{error::ApiResult, session::pause::display::display};

/// Takes the reports over a size limit out of `reports`, and says so in
/// one warning naming the first: a report never holds, so there is no one
/// to refuse it to, and the rest of the batch goes on.
pub(crate) fn drop_oversized(reports: &mut Reports) -> Option<String> {
    let mut dropped = 0usize;
    let mut first = None;
    let mut keep = |checked: ApiResult<()>| match checked {
        Ok(()) => true,
        Err(error) => {
            dropped += 1;
            first.get_or_insert(error);
            false
        }
    };
    let mut index = 0;
    reports.observed.retain(|o| {
        index += 1;
        keep(stepd_core::limits::observed(o, index - 1))
    });
    index = 0;
    reports.enlighten.retain(|e| {
        index += 1;
        keep(stepd_core::limits::enlighten(e, index - 1))
    });
    index = 0;
    reports.trace.retain(|t| {
        index += 1;
        keep(stepd_core::limits::trace(t, index - 1))
    });
    first.map(|error| {
        format!(
            "the daemon dropped {dropped} of the probe's reports over a size limit; the first: {}",
            error.message()
        )
    })
}

/// The observed values and enlightenings of `reports`, as events, in order.
pub(crate) fn payloads(reports: &mut Reports) -> Vec<Payload> {
    let observed = reports.observed.drain(..).map(|o| {
        Payload::Observed(Observed {
            kind: o.kind,
            name: o.name,
            value: o.value,
            scope_path: o.scope_path,
            coor: o.coor,
            observed_at: o.time,
        })
    });
    let enlighten = reports.enlighten.drain(..).map(|e| {
        Payload::Enlighten(Enlighten {
            coor: e.coor,
            value: Some(display(&e.value, "")),
            erase_previous: e.erase_previous,
            location: None,
        })
    });
    observed.chain(enlighten).collect()
}

/// Step `step` of the TRACE run from pause `key`, as the probe reported it.
pub(crate) fn trace_step(key: String, step: u32, record: TraceReport) -> Payload {
    let point = record.point.unwrap_or_default();
    Payload::Trace(Box::new(Trace {
        key,
        step,
        location: record.location,
        value: point
            .payload
            .as_ref()
            .map(|v| display(&value::print(v), &point.type_hint)),
        changed_locals: Vec::new(),
        coor: record.coor,
        point: Some(point),
    }))
}

/// The gap a probe's dropped reports leave: loss is never silent.
pub(crate) fn dropped(now: u64, in_all: u64) -> Payload {
    Payload::Gap(Gap {
        from_seq: 0,
        to_seq: 0,
        reason: format!(
            "the probe dropped {now} reports ({in_all} in all) because its buffer was full"
        ),
    })
}

#[cfg(test)]
mod tests {
    use stepd_proto::v1::{EnlightenReport, ObservedReport};

    use super::*;

    fn observed(name: &str) -> ObservedReport {
        ObservedReport {
            name: name.into(),
            ..Default::default()
        }
    }

    #[test]
    fn reports_over_a_limit_are_dropped_with_one_warning() {
        let mut reports = Reports {
            observed: vec![observed("a"), observed(&"x".repeat(1 << 20)), observed("b")],
            enlighten: vec![EnlightenReport::default()],
            ..Default::default()
        };
        let warning = drop_oversized(&mut reports).expect("a warning");
        assert!(warning.contains("dropped 1 of"), "{warning}");
        let names: Vec<_> = reports.observed.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        let events = payloads(&mut reports);
        assert!(matches!(
            events.as_slice(),
            [
                Payload::Observed(_),
                Payload::Observed(_),
                Payload::Enlighten(_)
            ]
        ));
        let mut fine = Reports {
            observed: vec![observed("a")],
            ..Default::default()
        };
        assert_eq!(drop_oversized(&mut fine), None);
        assert_eq!(fine.observed.len(), 1);
    }

    #[test]
    fn a_trace_step_and_a_gap_say_what_they_are() {
        let Payload::Trace(trace) = trace_step("p1".into(), 3, TraceReport::default()) else {
            panic!("a trace step");
        };
        assert_eq!((trace.key.as_str(), trace.step), ("p1", 3));
        let Payload::Gap(gap) = dropped(4, 9) else {
            panic!("a gap");
        };
        assert!(
            gap.reason.contains("dropped 4 reports (9 in all)"),
            "{}",
            gap.reason
        );
    }
}
