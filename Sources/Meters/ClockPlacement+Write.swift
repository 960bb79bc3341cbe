import GatewayCore
import GlucoseProfile

extension ClockPlacer {
    /// Places the records of a download that follows measurements with no known record number, among them a
    /// write of the clock outside a download (`meters set-clock`: the gateway read the clock, wrote it, and
    /// did not learn which records the meter held then). `base` is the last measurement that knew the
    /// meter's highest record (nil when there is none), `unsequenced` the measurements after it, oldest
    /// first, and `upper` this download's. Every record lies after `base`.
    ///
    /// Where the clock held from `base` to the write and from the write to `upper` (the usual case), the one
    /// change is the write, at a known instant: a record on the old clock was taken before it, one on the
    /// new clock after it, and the records' order settles the rest as for any change (`placeChange`). A
    /// record the instant of the write and the order cannot place is `uncertain`. In any other case (the
    /// clock also changed before or after the write) each record keeps the readings that fall inside the
    /// time between the two measurements whose clocks would give them, and is placed only when those agree.
    public func place(_ records: [ClockRecord], base: ClockSync?, unsequenced: [ClockSync], upper: ClockSync) -> [ClockPlacement] {
        let valid = records.indices.filter { records[$0].userFacing.isValid }
        var out = [ClockPlacement](repeating: .unplaced, count: records.count)
        guard !valid.isEmpty else { return out }
        let ordered = valid.sorted { records[$0].sequence < records[$1].sequence }
        let sorted = ordered.map { records[$0] }
        let middle = unsequenced   // oldest first, as the store keeps them (a read and its write share an instant)
        let placed: [ClockPlacement]
        if middle.count == 2, let read = middle.first, let write = middle.last, !read.setByGateway, write.setByGateway,
           base.map({ same($0.offsetSeconds, read.offsetSeconds) }) ?? true, same(write.offsetSeconds, upper.offsetSeconds) {
            // A write that left the clock where it was changed nothing.
            placed = same(read.offsetSeconds, write.offsetSeconds)
                ? placeInterval(sorted, lower: base, upper: upper)
                : placeAcrossWrite(sorted, base: base, read: read, write: write, upper: upper)
        } else {
            placed = placeByWindows(sorted, measurements: [base].compactMap { $0 } + middle + [upper], first: base == nil)
        }
        for (index, placement) in zip(ordered, placed) { out[index] = placement }
        return out
    }

    /// One change, the write at `write.at`, between the clock of `read` (and `base`) and that of `upper`.
    func placeAcrossWrite(_ records: [ClockRecord], base: ClockSync?, read: ClockSync, write: ClockSync, upper: ClockSync) -> [ClockPlacement] {
        let lower = ClockSync(at: base?.at ?? read.at, offsetSeconds: read.offsetSeconds, highestSequence: base?.highestSequence)
        let changed = placeChange(records, lower: lower, upper: upper, changeAt: write.at)
        var out: [ClockPlacement] = changed.map { p in
            guard case .placed(let instant, let f, _, _) = p else { return p }
            // The old clock held since `base`; the new one is the gateway's write.
            if f == upper.offsetSeconds { return .placed(instant: instant, offsetSeconds: f, since: write.at, reason: .setByGateway) }
            return .placed(instant: instant, offsetSeconds: f, since: lower.at, reason: base == nil ? .onlySync : .sameClock)
        }
        // With no measurement before the write, the records on the old clock are those of a first sync, whose
        // clock may have moved at a DST switch before it.
        if base == nil {
            let old = out.indices.filter { i in
                guard case .placed(_, let f, _, _) = out[i] else { return false }
                return f != upper.offsetSeconds
            }
            let first = placeFirst(old.map { records[$0] }, upper: read)
            for (index, placement) in zip(old, first) { out[index] = placement }
        }
        return out
    }

    /// Each record's possible instants: between two consecutive measurements, the one F where both show the
    /// same clock, else either; kept only where the instant lies between them. Before the first measurement
    /// (`first`: nothing was measured before it), what a first sync allows. Placed when the kept instants
    /// agree within the drift allowance, else `uncertain` with them (with every one when none is kept).
    func placeByWindows(_ records: [ClockRecord], measurements: [ClockSync], first: Bool) -> [ClockPlacement] {
        guard let head = measurements.first else { return records.map { _ in .unplaced } }
        let slack = Int64(driftSeconds) * 1000
        typealias Candidate = (instant: UnixMillis, offset: Int?, since: UnixMillis, reason: ClockPlacement.Reason)
        let beforeHead: [ClockPlacement] = first ? placeFirst(records, upper: head) : records.map { _ in .unplaced }
        return records.enumerated().map { i, r in
            var all: [Candidate] = [], kept: [Candidate] = []
            switch beforeHead[i] {
            case .placed(let t, let f, let since, let reason):
                all.append((t, f, since, reason))
                if t <= head.at.addingReportingOverflow(slack).partialValue { kept.append((t, f, since, reason)) }
            case .uncertain(let candidates):
                for t in candidates {
                    all.append((t, nil, head.at, .onlySync))
                    if t <= head.at.addingReportingOverflow(slack).partialValue { kept.append((t, nil, head.at, .onlySync)) }
                }
            case .unplaced: break
            }
            for (a, b) in zip(measurements, measurements.dropFirst()) {
                let offsets = same(a.offsetSeconds, b.offsetSeconds) ? [b.offsetSeconds] : [a.offsetSeconds, b.offsetSeconds]
                let reason: ClockPlacement.Reason = a.setByGateway || b.setByGateway ? .setByGateway : .sameClock
                for f in offsets {
                    guard let t = Self.instant(r, f) else { continue }
                    all.append((t, f, a.at, reason))
                    if t >= a.at.subtractingReportingOverflow(slack).partialValue, t <= b.at.addingReportingOverflow(slack).partialValue {
                        kept.append((t, f, a.at, reason))
                    }
                }
            }
            if let one = kept.first, let f = one.offset, kept.allSatisfy({
                let (d, o) = $0.instant.subtractingReportingOverflow(one.instant)
                return !o && d.magnitude <= UInt64(slack)
            }) {
                return .placed(instant: one.instant, offsetSeconds: f, since: one.since, reason: one.reason)
            }
            let candidates = Set((kept.isEmpty ? all : kept).map(\.instant)).sorted()
            return candidates.isEmpty ? .unplaced : .uncertain(candidates: candidates)
        }
    }
}
