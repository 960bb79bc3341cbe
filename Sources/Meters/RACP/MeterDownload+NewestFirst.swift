import GatewayCore
import GlucoseProfile

// The second RACP procedure, for meters that number newest first; the first, for every other meter, is
// `RACPProcedure` beside it, driven by `MeterDownload.Run.procedure()` (MeterDownload+RACP.swift).

/// What stays the same about a record of a meter whose numbers shift: everything it sends but the
/// sequence number (bytes 1-2 of 0x2A18), with the time the meter sent.
struct ShiftFreeKey: Hashable {
    var userFacingTime: String
    var measurement: [UInt8]
    var context: [UInt8]?

    init(_ r: NewReading) {
        userFacingTime = r.userFacingTime.isoString
        var m = r.rawMeasurement
        if m.count >= 3 { m.replaceSubrange(1..<3, with: [0, 0]) }
        measurement = m
        var c = r.rawContext
        if var bytes = c, bytes.count >= 3 { bytes.replaceSubrange(1..<3, with: [0, 0]); c = bytes }
        context = c
    }
}

extension MeterDownload.Run {
    /// The download of a meter that numbers its records newest first (`MeterHandling.Kind.reversedSequence`).
    ///
    /// On such a meter number 0 is always the newest record, so every stored number goes up by one with each
    /// new record: the numbers say nothing about a record by themselves, and "greater than or equal to the
    /// highest stored + 1" asks for the oldest records again and never for the new ones. What stays the same
    /// is the record itself (its time and bytes, the number aside), and the count.
    ///
    /// - Each record is stored under its position from the oldest, `count - 1 - number` (the number a
    ///   meter that counts upwards would have given it), and the number as sent stays in its raw bytes.
    /// - With `h` the highest position stored and `n` the meter's count now, the newest `n - h - 1` records
    ///   are new and number `n - h - 1` should be the newest one stored: only numbers up to that one are
    ///   asked for (`<=`). When that record is not stored (records were deleted, the memory wrapped, or a
    ///   record came between count and report), everything is downloaded instead; also when that report's
    ///   lowest number is dated before its highest (the meter numbers oldest first whatever its identity
    ///   says), so a wrong identity costs a full download each sync, never a reading.
    /// - Nothing is stored before a report has ended, and then all of it in one transaction, oldest first,
    ///   each record recognised by `ShiftFreeKey` among those stored (never stored twice): a link that drops
    ///   midway leaves nothing half-stored, and the next sync asks again. Afterwards the highest position
    ///   is set to `n - 1`, but only when the report brought every number it should have: a report that ended
    ///   early or skipped a number keeps what came and leaves the highest position lower, so the next
    ///   sync asks for the missing ones again: the highest position is set just below the oldest missing
    ///   record's (to -1, "download everything", when the oldest record itself is missing).
    /// - A meter whose numbers go beyond its count (it counted wrong, or a record came between count and
    ///   report) is positioned by its highest number instead, so no two records share a position.
    func reversedSequenceProcedure() async throws(Stop) {
        holdCommits = true
        let count: Int
        try await writeRACP(.reportNumberAll)
        switch try await nextRACPResponse() {
        case .numberOfRecords(let n):
            count = Int(n)
        case .response(_, let code) where code == .noRecordsFound:
            count = 0
        case .response(_, let code):
            throw .failed(DownloadError(.meter, "the meter numbers its records newest first and did not count them (\(code.failureText)); nothing is downloaded without the count"))
        }
        report.total = count
        intake.setTotal(count)
        guard count > 0 else {
            report.outcome = .noRecords
            return
        }
        let highest = try await highestStoredSequence()
        if let highest, highest >= 0, highest < count, let newest = UInt16(exactly: count - 1 - highest) {
            let request = RACPRequest.reportRecords(.lessThanOrEqual, .sequenceNumber(min: nil, max: newest))
            logger.info("meter \(meter.address): numbers newest first; \(count) records, asking for numbers 0...\(newest)")
            let records = try await reversedReport(request, expected: Int(newest) + 1)
            if let records {
                let (readings, positions) = positioned(records, count: count)
                let stored = try await storedKeys(readings)
                let overlap = readings.first { $0.rawMeasurement.count >= 3 && sequenceSent($0) == newest }
                let turned = datesRiseWithNumbers(readings)
                if turned {
                    logger.notice("meter \(meter.address): its records are dated oldest first by number, not newest first; downloading everything")
                }
                if let overlap, stored[ShiftFreeKey(overlap)] != nil, !turned {
                    try await commitReversed(readings, stored: stored, count: positions,
                                             missing: highestMissing(records, below: Int(newest) + 1))
                    return
                }
            }
            logger.notice("meter \(meter.address): the newest stored record is not where the count puts it; downloading everything")
        } else if let highest, highest >= count {
            logger.notice("meter \(meter.address): the meter holds \(count) records, fewer than stored (positions up to \(highest)); downloading everything")
        }
        guard let records = try await reversedReport(.reportAll, expected: count) else {
            report.outcome = .noRecords
            return
        }
        let (readings, positions) = positioned(records, count: count)
        try await commitReversed(readings, stored: try await storedKeys(readings), count: positions,
                                 missing: highestMissing(records, below: positions))
    }

    /// The highest number below `n` that `records` lack; nil when they have them all.
    private func highestMissing(_ records: [PendingRecord], below n: Int) -> Int? {
        var seen = Set<Int>()
        for p in records where Int(p.decoded.measurement.sequenceNumber) < n { seen.insert(Int(p.decoded.measurement.sequenceNumber)) }
        guard seen.count < n else { return nil }
        return (0..<n).reversed().first { !seen.contains($0) }
    }

    /// Runs one report and returns everything it brought, nil for "no records found". The records stay
    /// uncommitted.
    private func reversedReport(_ request: RACPRequest, expected: Int) async throws(Stop) -> [PendingRecord]? {
        var request = request
        while true {
            let before = intake.snapshot
            try await writeRACP(request)
            var answer: RACPResponseCode?
            while answer == nil {
                // Other indications (a stray count) are not the report's answer.
                if case .response(let op, let code) = try await nextRACPResponse(), op == .reportStoredRecords { answer = code }
            }
            guard let code = answer else { continue }
            if code == .success {
                try await waitForLateRecords(receivedBefore: before.received + before.malformed, expected: expected)
                return takeAll()
            }
            if code == .noRecordsFound {
                _ = takeAll()
                return nil
            }
            if RACPProcedure.refusals.contains(code), request != .reportAll {
                logger.info("meter \(meter.address): filtered report refused (\(code)); downloading everything")
                _ = takeAll()
                request = .reportAll
                continue
            }
            throw .failed(DownloadError(.meter, code.failureText))
        }
    }

    /// While commits are held: takes a full batch out of the intake (so the next batch wakes the session
    /// again) and ends the download when more is held than any report can bring.
    func holdReport() throws(Stop) {
        heldRecords += intake.take(final: false, limit: Int.max)
        let limit = download.options.maxHeldRecords
        guard heldRecords.count > limit else { return }
        heldRecords = []
        throw .failed(DownloadError(.meter, "the meter sent more than \(limit) records in one report without ending it; nothing of it is stored"))
    }

    private func takeAll() -> [PendingRecord] {
        var all = heldRecords
        heldRecords = []
        while true {
            let part = intake.take(final: true, limit: 10_000)
            if part.isEmpty { return all }
            all += part
        }
    }

    private func sequenceSent(_ r: NewReading) -> UInt16 {
        UInt16(r.rawMeasurement[1]) | UInt16(r.rawMeasurement[2]) << 8
    }

    /// Whether the lowest number of a report is dated before its highest: the meter numbers oldest first
    /// after all (its identity said otherwise), and the `<=` report brought its oldest records, not its
    /// newest. Only a full download, recognising every record by `ShiftFreeKey`, is safe then.
    private func datesRiseWithNumbers(_ readings: [NewReading]) -> Bool {
        let dated = readings.filter { $0.meterInstant != nil && $0.rawMeasurement.count >= 3 }
        guard let low = dated.min(by: { sequenceSent($0) < sequenceSent($1) }),
              let high = dated.max(by: { sequenceSent($0) < sequenceSent($1) }),
              sequenceSent(low) != sequenceSent(high) else { return false }
        return low.userFacingTime.naiveSeconds < high.userFacingTime.naiveSeconds
    }

    /// The readings of `records`, each under its position from the oldest (`n - 1 - number`), with `n` the
    /// count or, when a number reaches beyond it, the highest number + 1; and that `n`.
    private func positioned(_ records: [PendingRecord], count: Int) -> (readings: [NewReading], positions: Int) {
        let highestSent = records.map { Int($0.decoded.measurement.sequenceNumber) }.max() ?? -1
        let n = max(count, highestSent + 1)
        let readings = records.map { p in
            var r = handling.applied(to: interpreter.reading(p.decoded, context: p.context, rawContext: p.rawContext,
                                                              receivedAt: p.receivedAt))
            r.sequence = n - 1 - Int(p.decoded.measurement.sequenceNumber)
            return r
        }
        return (readings, n)
    }

    /// How many readings the store has for each key among `readings`' times.
    private func storedKeys(_ readings: [NewReading]) async throws(Stop) -> [ShiftFreeKey: Int] {
        let stored: [StoredReading]
        do {
            stored = try await download.store.readings(meter.address, atUserFacingTimes: readings.map(\.userFacingTime))
        } catch {
            throw .failed(DownloadError(.store, "cannot read the stored readings to compare: \(error)"))
        }
        var keys: [ShiftFreeKey: Int] = [:]
        for s in stored { keys[ShiftFreeKey(s.reading), default: 0] += 1 }
        return keys
    }

    /// Stores, in one transaction and oldest first, the readings not stored yet (a key stored k times
    /// accounts for k readings), then sets the highest position to `count - 1`, or when the report lacked
    /// numbers up to `missing`, just below that record's position.
    private func commitReversed(_ readings: [NewReading], stored: [ShiftFreeKey: Int], count: Int,
                                missing: Int?) async throws(Stop) {
        var left = stored
        var fresh: [NewReading] = []
        var seen = 0
        for r in readings.sorted(by: { $0.sequence < $1.sequence }) {
            let key = ShiftFreeKey(r)
            if let n = left[key], n > 0 {
                left[key] = n - 1
                seen += 1
            } else {
                fresh.append(r)
            }
        }
        do {
            let outcome = try await download.store.insertReadings(fresh)
            report.stored += outcome.inserted
            report.duplicates += seen + fresh.count - outcome.inserted - outcome.conflicts.count
            await note(outcome.conflicts)
            if let missing {
                logger.warning("meter \(meter.address): numbers newest first and its report lacked record \(missing) and maybe others; \(fresh.count) new records stored, the next sync asks again")
            }
            try await download.store.resetHighestSequence(meter.address, to: missing.map { count - 2 - $0 } ?? count - 1)
        } catch {
            throw .failed(DownloadError(.store, "cannot store readings: \(error)"))
        }
        report.outcome = .completed
    }
}
