import GatewayCore
import GlucoseProfile
import Support

extension MeterDownload.Run {
    // MARK: - Deadlines

    /// The earliest of: the inactivity timeout, the commit interval of the oldest record waiting to be
    /// committed (unless commits wait for the procedure), and `other`.
    func nextDeadline(_ other: ContinuousClock.Instant?) -> ContinuousClock.Instant {
        let options = download.options
        let timing = intake.timing
        var deadline = timing.lastActivity + options.inactivityTimeout
        if !holdCommits, let oldest = timing.oldestCommittable { deadline = min(deadline, oldest + options.commitInterval) }
        if let other { deadline = min(deadline, other) }
        return deadline
    }

    /// Makes the timer wake the session at `deadline` (one sleeping task; a new one only when it changes).
    func arm(_ deadline: ContinuousClock.Instant) {
        guard deadline != timerDeadline else { return }
        timer?.cancel()
        timerDeadline = deadline
        let clock = self.clock
        let continuation = self.continuation
        timer = Task {
            do { try await clock.sleep(until: deadline) } catch { return }
            continuation.yield(.deadline)
        }
    }

    /// A deadline came: ends a silent download, commits records that waited for the commit interval.
    func onDeadline() async throws(Stop) {
        let now = clock.now
        let timing = intake.timing
        if now - timing.lastActivity >= download.options.inactivityTimeout {
            logger.warning("meter \(meter.address): no notification for \(download.options.inactivityTimeout); ending the download")
            throw .timedOut
        }
        if let oldest = timing.oldestCommittable, now - oldest >= download.options.commitInterval {
            try await flush(final: false)
        }
    }

    /// Commits the records taken in, in batches of at most `commitBatchSize`; unless `final`, a trailing
    /// record that may still get its context stays.
    func flush(final: Bool) async throws(Stop) {
        try await keepUndecodable()
        guard !holdCommits else {
            try holdReport()
            return
        }
        while true {
            let records = intake.take(final: final, limit: download.options.commitBatchSize)
            // (The final commit also takes the records held back for their clock placement.)
            guard !records.isEmpty || (final && !meterClock.deferred.isEmpty) else { return }
            let placed = placedBatch(records, final: final)
            guard !placed.isEmpty else { continue }
            let batch = placed.map {
                handling.applied(to: interpreter.reading($0.record.decoded, context: $0.record.context, rawContext: $0.record.rawContext,
                                                         receivedAt: $0.record.receivedAt, placement: $0.placement))
            }
            do {
                let outcome = try await download.store.insertReadings(batch)
                report.stored += outcome.inserted
                report.duplicates += batch.count - outcome.inserted - outcome.conflicts.count
                await note(outcome.conflicts)
                await rememberPlacements(zip(batch, placed).map { ($0, $1.placement) })
            } catch {
                throw .failed(DownloadError(.store, "cannot store readings: \(error)"))
            }
        }
    }

    /// Counts, logs and records in the event log each conflict an insert found, without health values.
    func note(_ conflicts: [RecordConflict]) async {
        report.conflicts += conflicts.count
        for c in conflicts {
            let what = "record \(c.sequence) at \(c.userFacingTime.isoString) came again with other bytes; both kept as sent"
            let message = c.acknowledgedBy.isEmpty
                ? "\(what), the stored reading withheld from upload (\(ExclusionReason.conflictingRecord))"
                : "\(what); the stored reading was already acknowledged by \(c.acknowledgedBy.joined(separator: ", ")) and stays, it cannot be taken back"
            logger.warning("meter \(meter.address): \(message)")
            await log(.conflictingRecord, code: nil, message)
        }
    }

    // MARK: - End

    func finishLink() async {
        forwarder?.cancel()
        timer?.cancel()
        // In one round where the link can send them together; each has its answer before the disconnect.
        await link.unsubscribe(subscribed.reversed())
        subscribed.removeAll()
        await link.disconnect()
    }

    /// Saves the meter's row after the download with `event` in the same commit; `event` is logged alone
    /// when the row is not saved (the meter was unpaired meanwhile, the store refused it).
    func saveBookkeeping(logging event: GatewayEvent) async {
        await rememberClock(highest: [intake.snapshot.highestSequence, highestAtStart].compactMap { $0 }.max())
        var logged = false
        do {
            // A meter unpaired meanwhile has no row to update; saving would pair it again.
            guard var row = try await download.store.meter(meter.address) else {
                await log(event)
                return
            }
            let now = download.now()
            row.lastSeen = now
            if report.outcome.isComplete { row.lastSync = now }
            if let skew = report.skew { row.lastClockSkewSeconds = skew.seconds }
            if let features = report.features { row.features = Int(features) }
            if let v = report.identity.manufacturer { row.manufacturer = v }
            if let v = report.identity.model { row.model = v }
            if let v = report.identity.serial { row.serial = v }
            if let v = report.identity.firmware { row.firmware = v }
            if report.identity.wasRead { row.rawIdentity = report.identity.raw }
            try await download.store.saveMeter(row, logging: event)
            logged = true
            // The meter sends oldest first, so its last record carries its current counter. Below the highest
            // sequence of this download, the counter restarted at some point: later downloads resume from the
            // new counter, not the old one (SaveMeter and insert only ever raise it).
            let taken = intake.snapshot
            // The same holds after a full download that followed a detected counter reset (the meter's memory
            // now holds only the new counter's records).
            let wentBack = report.counterReset || taken.highestSequence.map { h in taken.lastMeasurementSequence.map { Int($0) < h } ?? false } ?? false
            // (Not on a meter that numbers newest first: its procedure sets the highest position itself.)
            if report.outcome == .completed, wentBack, !handling.contains(.reversedSequence), let last = taken.lastMeasurementSequence {
                try await download.store.resetHighestSequence(meter.address, to: Int(last))
            }
            // Records the meter counted but did not send may lie anywhere in the range (a value lost on
            // the way, e.g. a full notification socket), below records that did arrive: the next download
            // asks for the whole range again, as it was asked now. Where that was everything (a first
            // download, or one after a counter reset) the highest sequence becomes -1, so that the next
            // one reports from sequence 0 (an unset one would be taken from the stored readings).
            // What arrives twice is stored once.
            if report.outcome == .completed, recordsMissing, !handling.contains(.reversedSequence) {
                try await download.store.resetHighestSequence(meter.address, to: (wentBack ? nil : highestAtStart) ?? -1)
            }
        } catch {
            logger.warning("meter \(meter.address): cannot save sync bookkeeping: \(error)")
            if !logged { await log(event) }
        }
    }

    func event(_ kind: EventKind, code: Int?, _ message: String) -> GatewayEvent {
        GatewayEvent(at: download.now(), kind: kind, meterAddress: meter.address, code: code, message: message)
    }

    func log(_ kind: EventKind, code: Int?, _ message: String) async {
        await log(event(kind, code: code, message))
    }

    func log(_ event: GatewayEvent) async {
        do {
            try await download.store.log(event)
        } catch {
            logger.debug("cannot write event log: \(error)")
        }
    }
}
