import GatewayCore
import GlucoseProfile

/// Which meters are known to follow DST, or to ignore it, by manufacturer and model as Device Information
/// gives them. Empty: no public report shows how any Bluetooth LE glucose meter behaves at a switch, so
/// every meter is `DSTBehaviour.unknown` (see the README's "Times").
public enum MeterClockProfile {
    public static let known: [(manufacturer: String, model: String?, behaviour: DSTBehaviour)] = []

    public static func dstBehaviour(for meter: MeterInfo) -> DSTBehaviour {
        for entry in known {
            guard meter.manufacturer?.lowercased().hasPrefix(entry.manufacturer.lowercased()) == true else { continue }
            if let model = entry.model, meter.model != model { continue }
            return entry.behaviour
        }
        return .unknown
    }
}

extension ClockSync {
    /// F from a clock read: the meter showed `shown` at some moment between `asked` and `answered`. A clock
    /// shows whole seconds, so it was somewhere in the second after `shown` when read: F is taken as
    /// `shown` + 0.5 s minus the middle of the read, to the nearest second (half a second down). Taking it
    /// as `shown` minus the answer's arrival (`offset(clock:now:)`) comes out a second short about half the
    /// time for a clock that is exactly right, and every reading it places is then uploaded a second late.
    static func offset(read shown: GlucoseDateTime, asked: UnixMillis, answered: UnixMillis) -> Int? {
        guard shown.isValid else { return nil }
        let (clockMillis, overflow) = shown.naiveSeconds.multipliedReportingOverflow(by: 1000)
        guard !overflow, let seconds = secondsAhead(clockMillis, of: middle(asked, answered)) else { return nil }
        return Int(exactly: seconds)
    }

    /// The middle of a read asked for at `asked` and answered at `answered`, in a form that cannot overflow.
    static func middle(_ asked: UnixMillis, _ answered: UnixMillis) -> UnixMillis {
        asked / 2 + answered / 2 + (asked % 2 + answered % 2) / 2
    }

    /// How far a clock showing the whole second `shownMillis` at `moment` runs ahead, in seconds: the clock
    /// was somewhere in the second after the one shown, so `shownMillis` + 0.5 s against `moment`, to the
    /// nearest second with a half rounding down (a clock read the instant it ticked keeps what it shows).
    /// Nil on overflow. The skew against the zone (`ClockSkew`) and F against UTC both use it, so the two
    /// never disagree by the second a rounding could put between them.
    static func secondsAhead(_ shownMillis: Int64, of moment: UnixMillis) -> Int64? {
        let (delta, o1) = shownMillis.subtractingReportingOverflow(moment)
        let (estimate, o2) = delta.addingReportingOverflow(500)
        guard !o1, !o2 else { return nil }
        return estimate >= 0 ? (estimate + 499) / 1000 : -((-estimate + 500) / 1000)
    }
}

/// What a download knows of the meter's clock: the last measurement remembered, the one taken now, a
/// write of the clock, and every record of this download placed so far (`ClockPlacer`).
struct MeterClockTrack {
    /// Every remembered measurement, oldest first.
    var history: [ClockSync] = []
    /// The newest remembered measurement (nil on a meter never measured); after a write of the clock outside
    /// a download, the last one that knew the meter's highest record.
    var previous: ClockSync?
    /// The measurements after `previous` that knew no record number, when a write of the clock outside a
    /// download (`meters set-clock`) is among them: the records lie around them by time alone.
    var unsequenced: [ClockSync] = []
    /// This download's measurement, taken at connection, before any write.
    var current: ClockSync?
    /// The gateway's write of the clock in this download.
    var written: ClockSync?
    var placer: ClockPlacer?
    /// The records of this download placed so far, and the ones held back because they were uncertain
    /// with what had arrived (a later record may settle them), with their index in `records`.
    var records: [ClockRecord] = []
    /// When each of `records` arrived (for a meter without a readable clock, `RepeatedHourPlacer`).
    var receivedAt: [UnixMillis] = []
    var deferred: [(record: PendingRecord, index: Int)] = []
}

extension MeterDownload.Run {
    /// Measures F from the clock value just read (before any write), asked for at `asked` and answered at
    /// `answered`, and loads the meter's last measurement. A store that cannot be read leaves the placement
    /// off: the times are then those of the zone rules corrected by the skew, as before the clock history.
    func measureClock(_ shown: GlucoseDateTime, asked: UnixMillis, answered: UnixMillis, zone: MeterTimeZone) async {
        guard download.options.clinical.clockSkewCorrection, !handling.contains(.reversedSequence),
              let f = ClockSync.offset(read: shown, asked: asked, answered: answered) else { return }
        do {
            let history = try await download.store.clockHistory(meter.address)
            meterClock.history = history
            meterClock.previous = history.last
            // A write outside a download knew no record number: the records after the last measurement that
            // did are placed around it by its time (`ClockPlacer.place(_:base:unsequenced:upper:)`).
            let known = history.lastIndex { $0.highestSequence != nil }
            let tail = Array(history[(known.map { $0 + 1 } ?? 0)...])
            if tail.contains(where: \.setByGateway) {
                meterClock.previous = known.map { history[$0] }
                meterClock.unsequenced = tail
            }
        } catch {
            logger.warning("meter \(meter.address): cannot read its clock history (\(error)); reading times follow the zone rules")
            return
        }
        meterClock.current = ClockSync(at: download.now(), offsetSeconds: f, highestSequence: nil)
        var seen = meter
        seen.apply(report.identity)
        meterClock.placer = ClockPlacer(zone: zone, dst: MeterClockProfile.dstBehaviour(for: seen))
    }

    /// The gateway wrote `new` to the clock: from now on the meter runs at its F.
    func clockWritten(_ new: GlucoseDateTime) {
        guard meterClock.current != nil, let f = ClockSync.offset(clock: new, now: download.now()) else { return }
        meterClock.written = ClockSync(at: download.now(), offsetSeconds: f, highestSequence: nil, setByGateway: true)
    }

    /// The readings to commit now from `records`, each with its placement. Unless `final`, a record that is
    /// uncertain with what has arrived waits for the end of the download (a later record may place it);
    /// with `final` the waiting ones come first.
    func placedBatch(_ records: [PendingRecord], final: Bool) -> [(record: PendingRecord, placement: ClockPlacement?)] {
        // Without a readable clock (or with correction off) the zone's rules place the records, and only the
        // repeated autumn hour needs more.
        guard let zone = interpreter.zone, !handling.contains(.reversedSequence) else { return records.map { ($0, nil) } }
        var entries: [(record: PendingRecord, index: Int?)] = []
        if final {
            entries = meterClock.deferred.map { ($0.record, $0.index) }
            meterClock.deferred.removeAll()
        }
        for record in records {
            let m = record.decoded.measurement
            // Only records newer than those stored before: a record downloaded again was placed (or stored
            // before the clock history) when it first came, and a counter that wrapped or restarted
            // numbers its records below the stored ones, outside any interval between measurements.
            guard record.decoded.timeUsable, highestAtStart.map({ Int(m.sequenceNumber) > $0 }) ?? true else {
                entries.append((record, nil))
                continue
            }
            meterClock.records.append(ClockRecord(sequence: Int(m.sequenceNumber), userFacing: m.userFacingTime,
                                                  timeOffsetMinutes: Int(m.timeOffset ?? 0)))
            meterClock.receivedAt.append(record.receivedAt)
            entries.append((record, meterClock.records.count - 1))
        }
        // The records of this download all lie between the last measurement and this one. Where one is
        // numbered at or below the highest record of the last measurement (a counter that restarted), that
        // number says nothing about which side of it the record lies.
        let placements: [ClockPlacement?]
        if let placer = meterClock.placer, let current = meterClock.current {
            var previous = meterClock.previous
            if let h = previous?.highestSequence, meterClock.records.contains(where: { $0.sequence <= h }) { previous?.highestSequence = nil }
            placements = meterClock.unsequenced.isEmpty
                ? placer.place(meterClock.records, syncs: [previous, current].compactMap { $0 })
                : placer.place(meterClock.records, base: previous, unsequenced: meterClock.unsequenced, upper: current)
        } else {
            placements = RepeatedHourPlacer.place(zip(meterClock.records, meterClock.receivedAt).map {
                RepeatedHourPlacer.Record(sequence: $0.sequence, userFacing: $0.userFacing, receivedAt: $1)
            }, zone: zone)
        }
        var out: [(record: PendingRecord, placement: ClockPlacement?)] = []
        for entry in entries {
            guard let index = entry.index else {
                out.append((entry.record, nil))
                continue
            }
            let placement = placements[index]
            if !final, case .uncertain? = placement {
                meterClock.deferred.append((entry.record, index))
                continue
            }
            out.append((entry.record, placement))
        }
        return out
    }

    /// Keeps where the readings just committed were placed (their first placement stays).
    func rememberPlacements(_ placed: [(reading: NewReading, placement: ClockPlacement?)]) async {
        // Without a clock the only placements are of the repeated hour.
        let because = meterClock.placer == nil ? "repeated hour, no readable clock" : "clock changed between syncs"
        let rows = placed.compactMap {
            $0.placement?.stored(sequence: $0.reading.sequence, userFacingTime: $0.reading.userFacingTime, uncertainBecause: because)
        }
        guard !rows.isEmpty else { return }
        do {
            try await download.store.rememberPlacements(meter.address, rows)
        } catch {
            logger.warning("meter \(meter.address): cannot keep where its readings were placed in time: \(error)")
        }
    }

    /// Remembers this download's measurement, and the gateway's write of the clock. Only after a download
    /// that completed is the meter's highest record known, which says which records came before them. After
    /// one that did not, neither carries it (records of the next download are then not assumed to come after
    /// them), and a write is kept as `meters set-clock` keeps its own: the clock as read and as written, each
    /// at its time, so that the next download places the records around the write by their times
    /// (`ClockPlacer.place(_:base:unsequenced:upper:)`) and keeps `time-uncertain` those both clocks explain.
    func rememberClock(highest: Int?) async {
        guard var current = meterClock.current else { return }
        let complete = report.outcome.isComplete
        current.highestSequence = complete ? highest : nil
        var syncs = [current]
        if var written = meterClock.written {
            written.highestSequence = complete ? highest : nil
            syncs.append(written)
        }
        do {
            try await download.store.rememberClock(meter.address, syncs)
        } catch {
            logger.warning("meter \(meter.address): cannot remember its clock: \(error)")
        }
    }
}

extension ClockPlacement {
    /// The instant a reading placed here gets instead of `zoneInstant` (its time read in the meter's zone);
    /// nil to keep the interpreter's. Within the skew threshold of the zone's reading the zone's stays, so a
    /// meter whose clock is right gets the times (and upload bodies) it always got.
    func instant(replacing zoneInstant: UnixMillis, settings: ClinicalSettings) -> UnixMillis? {
        guard case .placed(let instant, _, _, _) = self else { return nil }
        let (d, o) = instant.subtractingReportingOverflow(zoneInstant)
        let threshold = Int64(clamping: settings.clockSkewThresholdSeconds)
        if !o, threshold >= 0, threshold < Int64.max / 1000, d.magnitude <= UInt64(threshold * 1000) { return zoneInstant }
        return instant
    }

    /// Whether the reading is kept out as `time-uncertain` (placements are made only where the settings
    /// allow: the clock history only with `clock_skew_correction` on).
    func excludes(_ settings: ClinicalSettings) -> Bool {
        if case .uncertain = self { return true }
        return false
    }
}

extension MeterDownload.Run {
    /// How readings held for their time by an earlier download (`time-in-future`, `time-unresolved`) are
    /// placed now that a measurement may release them: like every other record, by the clock history. One
    /// that was placed when it was stored keeps that placement; one that was not lies between the last
    /// measurement before it arrived and the first after (this one at the latest), with no record numbers
    /// assumed, so that only its time says on which side of a change it lies. Nil when the clock history is
    /// not used (the one skew then corrects it, as before).
    func heldReadingPlacer() async throws -> (@Sendable (ClockRecord, UnixMillis) -> ClockPlacement?)? {
        guard let placer = meterClock.placer, let current = meterClock.current else { return nil }
        var kept: [String: ReadingClock] = [:]
        for p in try await download.store.placements(meter.address) { kept[Self.placementKey(p.sequence, p.userFacingTime)] = p }
        let history = meterClock.history + [current]
        return { [kept] record, receivedAt in
            if let p = kept[Self.placementKey(record.sequence, record.userFacing)] {
                guard let f = p.offsetSeconds else { return .uncertain(candidates: p.candidates) }
                return ClockPlacer.instant(record, f).map {
                    .placed(instant: $0, offsetSeconds: f, since: p.since ?? current.at, reason: ClockPlacement.Reason(rawValue: p.reason) ?? .sameClock)
                } ?? .unplaced
            }
            var lower = history.last { $0.at < receivedAt }
            var upper = history.first { $0.at >= receivedAt } ?? current
            lower?.highestSequence = nil
            upper.highestSequence = nil
            return placer.place([record], syncs: [lower, upper].compactMap { $0 }).first
        }
    }

    static func placementKey(_ sequence: Int, _ time: GlucoseDateTime) -> String { "\(sequence)|\(time.isoString)" }
}
