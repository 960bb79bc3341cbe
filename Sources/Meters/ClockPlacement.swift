import GatewayCore
import GlucoseProfile

extension ExclusionReason {
    /// The meter's clock changed between two measurements and nothing (the gateway's own write, a DST
    /// switch on a meter known to follow it, the order of the records) says on which side of the change
    /// this reading was taken: both candidate instants are kept (`ClockPlacement.uncertain`) and nothing
    /// is uploaded. Also the repeated autumn hour on a meter without a readable clock.
    public static let timeUncertain = ExclusionReason(rawValue: "time-uncertain")
}

/// Whether a meter's clock moves by itself at DST switches, as its profile says.
public enum DSTBehaviour: String, Sendable, Equatable {
    /// Nothing says (every meter today: no public report shows one way or the other).
    case unknown
    /// The clock never moves by itself.
    case ignores
    /// The clock follows the DST switches of the meter's zone.
    case follows
}

/// What placement needs of one record.
public struct ClockRecord: Sendable, Equatable {
    public var sequence: Int
    /// Base time + time offset, as the meter showed it.
    public var userFacing: GlucoseDateTime
    /// The record's time offset field in minutes (0 when absent).
    public var timeOffsetMinutes: Int

    public init(sequence: Int, userFacing: GlucoseDateTime, timeOffsetMinutes: Int = 0) {
        self.sequence = sequence
        self.userFacing = userFacing
        self.timeOffsetMinutes = timeOffsetMinutes
    }
}

/// Where one record was placed in time.
public enum ClockPlacement: Sendable, Equatable {
    /// Why an F was certain.
    public enum Reason: String, Sendable, Equatable {
        /// The clock showed the same F at the measurements before and after the record.
        case sameClock = "same clock"
        /// The only measurement is the one after the record (a first sync), and nothing in the records
        /// or the zone says the clock moved.
        case onlySync = "only sync"
        /// The record lies after the gateway's own write of the clock and before a measurement with the
        /// same F.
        case setByGateway = "set by the gateway"
        /// The meter is known to follow DST and the change is the zone's switch between the two syncs.
        case dstSwitch = "DST switch"
        /// The change lies where the records show it (the time offset field changes, the time runs back).
        case recordOrder = "record order"
    }

    /// Certain: `instant` = user-facing time − F, F as measured at the sync at `since`.
    case placed(instant: UnixMillis, offsetSeconds: Int, since: UnixMillis, reason: Reason)
    /// Not certain: the candidate instants, ascending (one alone when the only other reading is a time the
    /// clock cannot have shown). Never uploaded.
    case uncertain(candidates: [UnixMillis])
    /// No measurement, or the record's time is not a valid date: left to the zone rules.
    case unplaced

    public var instant: UnixMillis? {
        if case .placed(let instant, _, _, _) = self { return instant }
        return nil
    }

    /// As the store keeps it beside the reading; nil for `unplaced` (the zone rules, nothing to keep).
    public func stored(sequence: Int, userFacingTime: GlucoseDateTime, uncertainBecause: String = "clock changed between syncs") -> ReadingClock? {
        switch self {
        case .placed(_, let f, let since, let reason):
            ReadingClock(sequence: sequence, userFacingTime: userFacingTime, offsetSeconds: f, since: since, reason: reason.rawValue)
        case .uncertain(let candidates):
            ReadingClock(sequence: sequence, userFacingTime: userFacingTime, offsetSeconds: nil, since: nil,
                         reason: uncertainBecause, candidates: candidates)
        case .unplaced:
            nil
        }
    }
}

/// Places records in time from the meter's clock history: a pure function of the measurements, the records
/// and the meter's zone. See `place` for the rules.
public struct ClockPlacer: Sendable {
    /// Two measurements within this many seconds show the same clock. 2 min: a meter's crystal drifts a few
    /// seconds a week (±20 ppm is 12 s), the clock is read to the second, and a user who sets a clock moves
    /// it by minutes; it is also the default `clock_skew_threshold_s`, below which times were never corrected.
    public static let defaultDriftSeconds = 120

    public var zone: MeterTimeZone?
    public var dst: DSTBehaviour
    public var driftSeconds: Int

    public init(zone: MeterTimeZone?, dst: DSTBehaviour = .unknown, driftSeconds: Int = ClockPlacer.defaultDriftSeconds) {
        self.zone = zone
        self.dst = dst
        self.driftSeconds = min(max(0, driftSeconds), 86_400)
    }

    /// One placement per record, in the order given.
    ///
    /// A record belongs between the last measurement whose highest sequence is below its own and the first
    /// whose highest sequence reaches it (the newest measurement takes every record above). Then:
    /// 1. Same F at both ends (within the drift allowance): that F (as measured at the later end).
    /// 2. F changed: the change lies at one place in sequence order; records before it get the old F, after
    ///    it the new. The places kept are those that leave the records in time order and between the two
    ///    measurements; where the time offset field steps by the change, only there; on a meter known to
    ///    follow DST whose change is the zone's switch, where the switch falls. A record every kept place
    ///    puts on the same side is certain; the others are `uncertain` with both instants. The gateway's own
    ///    write is a measurement of its own, so its change is always at a known place.
    /// 3. No measurement before (a first sync): the one F, except that where the zone switched DST before
    ///    the measurement, a meter not known to ignore DST may have followed it: the records whose instant
    ///    would then differ are `uncertain` (or, on a meter known to follow DST, placed by the zone).
    public func place(_ records: [ClockRecord], syncs: [ClockSync]) -> [ClockPlacement] {
        var out = [ClockPlacement](repeating: .unplaced, count: records.count)
        let history = syncs.sorted { $0.at < $1.at }
        guard !history.isEmpty else { return out }
        // Group the records (by index) under the measurement after them.
        var groups: [Int: [Int]] = [:]
        for (index, record) in records.enumerated() where record.userFacing.isValid {
            let upper = history.firstIndex { ($0.highestSequence ?? Int.min) >= record.sequence } ?? history.count - 1
            groups[upper, default: []].append(index)
        }
        for (upper, indices) in groups {
            let ordered = indices.sorted { records[$0].sequence < records[$1].sequence }
            let lower = upper > 0 ? history[upper - 1] : nil
            let placed = placeInterval(ordered.map { records[$0] }, lower: lower, upper: history[upper])
            for (index, placement) in zip(ordered, placed) { out[index] = placement }
        }
        return out
    }

    /// `userFacing − offset` in milliseconds; nil on overflow (an F read from a file can be any number).
    static func instant(_ record: ClockRecord, _ offsetSeconds: Int) -> UnixMillis? {
        let (ms, o1) = Int64(offsetSeconds).multipliedReportingOverflow(by: 1000)
        let (uf, o2) = record.userFacing.naiveSeconds.multipliedReportingOverflow(by: 1000)
        let (t, o3) = uf.subtractingReportingOverflow(ms)
        return o1 || o2 || o3 ? nil : t
    }

    func same(_ a: Int, _ b: Int) -> Bool {
        let (d, o) = a.subtractingReportingOverflow(b)
        return !o && d.magnitude <= UInt(driftSeconds)
    }

    /// The zone's offset change between two instants, in seconds (0 without a zone).
    func zoneChange(from: UnixMillis, to: UnixMillis) -> Int {
        guard let zone else { return 0 }
        return zone.offsetSeconds(at: to / 1000) - zone.offsetSeconds(at: from / 1000)
    }

    func placeInterval(_ records: [ClockRecord], lower: ClockSync?, upper: ClockSync) -> [ClockPlacement] {
        guard let lower else { return placeFirst(records, upper: upper) }
        if same(lower.offsetSeconds, upper.offsetSeconds) {
            // The clock held since the lower measurement; the upper one's value, the nearer in drift to new
            // records and the one a download measures itself (a second's rounding apart otherwise).
            let reason: ClockPlacement.Reason = lower.setByGateway ? .setByGateway : .sameClock
            return records.map { r in
                Self.instant(r, upper.offsetSeconds).map {
                    .placed(instant: $0, offsetSeconds: upper.offsetSeconds, since: lower.at, reason: reason)
                } ?? .unplaced
            }
        }
        return placeChange(records, lower: lower, upper: upper)
    }

    // MARK: - A change between two measurements

    /// `changeAt`: the change is the gateway's write of the clock at that instant (`meters set-clock`, whose
    /// record number is not known): a record on the old clock was taken before it, one on the new after it.
    func placeChange(_ records: [ClockRecord], lower: ClockSync, upper: ClockSync, changeAt: UnixMillis? = nil) -> [ClockPlacement] {
        let n = records.count
        let old = lower.offsetSeconds, new = upper.offsetSeconds
        var before: [UnixMillis] = [], after: [UnixMillis] = []
        for r in records {
            guard let b = Self.instant(r, old), let a = Self.instant(r, new) else {
                return records.map { _ in .unplaced }
            }
            before.append(b)
            after.append(a)
        }
        let slack = Int64(driftSeconds) * 1000
        // Records come after the lower measurement only where it knew the meter's highest record then.
        let earliest = lower.highestSequence == nil || lower.at.subtractingReportingOverflow(slack).overflow ? Int64.min : lower.at - slack
        let latest = upper.at.addingReportingOverflow(slack).overflow ? Int64.max : upper.at + slack
        // Around a write at a known instant: the old clock's records before it, the new clock's after it.
        let oldLatest = changeAt.map { $0.addingReportingOverflow(slack).overflow ? latest : min(latest, $0 + slack) } ?? latest
        let newEarliest = changeAt.map { $0.subtractingReportingOverflow(slack).overflow ? earliest : max(earliest, $0 - slack) } ?? earliest
        // prefixOK[k]: records 0..<k on the old clock are in order and within the bounds; suffixOK[k]:
        // records k..<n on the new clock are.
        var prefixOK = [Bool](repeating: false, count: n + 1)
        prefixOK[0] = true
        for i in 0..<n {
            let inBounds = before[i] >= earliest && before[i] <= oldLatest
            prefixOK[i + 1] = prefixOK[i] && inBounds && (i == 0 || before[i] >= before[i - 1])
        }
        var suffixOK = [Bool](repeating: false, count: n + 1)
        suffixOK[n] = true
        for i in stride(from: n - 1, through: 0, by: -1) {
            let inBounds = after[i] >= newEarliest && after[i] <= latest
            suffixOK[i] = suffixOK[i + 1] && inBounds && (i == n - 1 || after[i + 1] >= after[i])
        }
        var splits: [Int] = []
        for k in 0...n where prefixOK[k] && suffixOK[k] && (k == 0 || k == n || after[k] >= before[k - 1]) {
            splits.append(k)
        }
        var reason = ClockPlacement.Reason.recordOrder
        // The time offset field stepping by the change shows where it was made.
        let (change, changeOverflow) = new.subtractingReportingOverflow(old)
        guard !changeOverflow else { return records.map { _ in .unplaced } }
        let stepped = (1..<max(n, 1)).filter { k in
            let (d, o) = (records[k].timeOffsetMinutes - records[k - 1].timeOffsetMinutes).multipliedReportingOverflow(by: 60)
            return !o && d != 0 && same(d, change)
        }
        if !stepped.isEmpty {
            let shown = splits.filter { stepped.contains($0) }
            if !shown.isEmpty { splits = shown }
        } else if changeAt == nil, dst == .follows, let zone, same(change, zoneChange(from: lower.at, to: upper.at)) {
            // The meter moved its clock at the switch: each record read in the zone, the clock's skew against
            // the zone (F minus the zone's offset) being the same at both measurements.
            let (skew, o) = new.subtractingReportingOverflow(zone.offsetSeconds(at: upper.at / 1000))
            let atSwitch = o ? [] : splits.filter { k in
                (0..<n).allSatisfy { i in
                    let t = i < k ? before[i] : after[i]
                    let f = i < k ? old : new
                    return same(f, zone.offsetSeconds(at: t / 1000).addingReportingOverflow(skew).partialValue)
                }
            }
            if !atSwitch.isEmpty {
                splits = atSwitch
                reason = .dstSwitch
            }
        }
        guard let first = splits.first, let last = splits.last else {
            // No single change explains the records: nothing is certain.
            return (0..<n).map { i in .uncertain(candidates: [min(before[i], after[i]), max(before[i], after[i])]) }
        }
        // Record i is on the old clock for every kept split above i, on the new for every one at or below it.
        return (0..<n).map { i in
            if i < first { return .placed(instant: before[i], offsetSeconds: old, since: lower.at, reason: reason) }
            if i >= last { return .placed(instant: after[i], offsetSeconds: new, since: upper.at, reason: reason) }
            return .uncertain(candidates: [min(before[i], after[i]), max(before[i], after[i])])
        }
    }

    // MARK: - A first sync

    func placeFirst(_ records: [ClockRecord], upper: ClockSync) -> [ClockPlacement] {
        let f = upper.offsetSeconds
        var out: [ClockPlacement] = records.map { r in
            Self.instant(r, f).map { .placed(instant: $0, offsetSeconds: f, since: upper.at, reason: .onlySync) } ?? .unplaced
        }
        // The time offset field stepping shows a change the one measurement cannot see: records before the
        // step were on the clock before it, by the step.
        if let step = records.indices.dropFirst().last(where: { records[$0].timeOffsetMinutes != records[$0 - 1].timeOffsetMinutes }) {
            let (d, o) = (records[step].timeOffsetMinutes - records[step - 1].timeOffsetMinutes).multipliedReportingOverflow(by: 60)
            for i in 0..<step {
                let (earlier, o2) = f.subtractingReportingOverflow(d)
                out[i] = !o && !o2 ? Self.instant(records[i], earlier).map {
                    .placed(instant: $0, offsetSeconds: earlier, since: upper.at, reason: .recordOrder)
                } ?? .unplaced : .unplaced
            }
            return out
        }
        guard dst != .ignores, let zone else { return out }
        // Had the meter followed the zone's switches, its skew against the zone would be the same now as
        // then: the record is that civil time read in the zone.
        let (skew, o) = f.subtractingReportingOverflow(zone.offsetSeconds(at: upper.at / 1000))
        guard !o else { return out }
        for (i, r) in records.enumerated() {
            guard case .placed(let constant, _, _, _) = out[i] else { continue }
            // Placed records have a user-facing time and F whose difference in milliseconds fits.
            let shifted = GlucoseDateTime(naiveSeconds: r.userFacing.naiveSeconds - Int64(skew))
            var following: [UnixMillis] = []
            switch zone.resolve(shifted) {
            case .unique(let t)?: following = [t]
            case .repeated(let t, let later)?: following = [t, later]
            case .gap?, nil: following = []   // a civil time a following clock never showed
            }
            if dst == .follows {
                if following.count == 1, let t = following.first {
                    out[i] = .placed(instant: t, offsetSeconds: r.userFacing.naiveSeconds.subtractingReportingOverflow(t / 1000).partialValue.clampedInt,
                                     since: upper.at, reason: .dstSwitch)
                } else {
                    out[i] = .uncertain(candidates: following.isEmpty ? [constant] : following)
                }
                continue
            }
            let candidates = Set(following + [constant]).sorted()
            if candidates.count > 1 { out[i] = .uncertain(candidates: candidates) }
        }
        return out
    }
}

extension Int64 {
    fileprivate var clampedInt: Int { Int(clamping: self) }
}

/// A meter without a readable clock: its times are read in its zone, uncorrected. Only the repeated autumn
/// hour is placed here, where a wall time names two instants: the first when the gateway received the
/// record before the second occurrence, the second when the record before it was taken after the first
/// occurrence (the wall time ran back: the clock fell back between them), the first when the record after
/// it was taken before the second; otherwise `uncertain` with both.
public enum RepeatedHourPlacer {
    public struct Record: Sendable, Equatable {
        public var sequence: Int
        public var userFacing: GlucoseDateTime
        public var receivedAt: UnixMillis
        public init(sequence: Int, userFacing: GlucoseDateTime, receivedAt: UnixMillis) {
            self.sequence = sequence
            self.userFacing = userFacing
            self.receivedAt = receivedAt
        }
    }

    /// One placement per record, in the order given: nil where the zone rules alone are right (a wall time
    /// that occurred once, or the first occurrence settled), `placed` for a settled second occurrence.
    public static func place(_ records: [Record], zone: MeterTimeZone) -> [ClockPlacement?] {
        let order = records.indices.sorted { records[$0].sequence < records[$1].sequence }
        // Each record's possible instants, in sequence order.
        let options: [[UnixMillis]] = order.map { i in
            switch zone.resolve(records[i].userFacing) {
            case .repeated(let first, let second)?: [first, second]
            case .unique(let t)?, .gap(let t, _)?: [t]
            case nil: []
            }
        }
        var out = [ClockPlacement?](repeating: nil, count: records.count)
        for (position, i) in order.enumerated() {
            let candidates = options[position]
            guard candidates.count == 2, let first = candidates.first, let second = candidates.last else { continue }
            let r = records[i]
            // Received before the second occurrence happened: the first.
            if r.receivedAt < second { continue }
            // The record before it (in sequence order) was taken after this one's first occurrence, however it
            // is read: this is the second. The one after it was taken before this one's second: the first.
            let before = options[..<position].last { !$0.isEmpty }?.min()
            let after = options[(position + 1)...].first { !$0.isEmpty }?.max()
            if let before, before > first, before <= second {
                let offset = Int(clamping: r.userFacing.naiveSeconds - second / 1000)
                out[i] = .placed(instant: second, offsetSeconds: offset, since: r.receivedAt, reason: .recordOrder)
            } else if let after, after < second, after >= first {
                continue
            } else {
                out[i] = .uncertain(candidates: [first, second])
            }
        }
        return out
    }
}
