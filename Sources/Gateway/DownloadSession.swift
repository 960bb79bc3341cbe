import GatewayCore
import GlucoseProfile
import Synchronization

/// How a session stops early, internally.
enum Stop: Error {
    case disconnected(String)
    case timedOut
    case failed(DownloadError)
}

enum Input: Sendable {
    /// An RACP indication or the end of the link (records and contexts are taken in by `DownloadIntake`).
    case link(MeterLinkEvent)
    case linkEnded
    /// A full batch waits to be committed.
    case batchFull
    /// The intake took in something that moves a deadline (the first record to commit, a late value).
    case wake
    /// The deadline the timer was armed for has come.
    case deadline
}

/// The state of one running download. Lives inside the caller's task only.
final class DownloadSession {
    let download: MeterDownload
    let link: any MeterLink
    let meter: MeterInfo
    let progress: @Sendable (DownloadProgress) -> Void
    let logger: Logger
    let clock: any SessionClock

    var report: DownloadReport
    var interpreter: ReadingInterpreter
    let intake: DownloadIntake
    var subscribed: [GATTUUID] = []
    /// The highest stored sequence when the procedure started, and whether records the meter announced
    /// did not arrive (see `saveBookkeeping`).
    var highestAtStart: Int?
    var recordsMissing = false
    var hasContextCharacteristic = false
    /// What this meter needs beyond the profile, from its identity as read in this session (`MeterHandling`).
    var handling = MeterHandling(kinds: [])
    /// Commit only when the procedure says so (a meter that numbers newest first), not in batches.
    var holdCommits = false
    /// Records taken out of the intake while commits are held (`holdReport`).
    var heldRecords: [PendingRecord] = []

    var inputs: AsyncStream<Input>.Iterator
    let continuation: AsyncStream<Input>.Continuation
    var forwarder: Task<Void, Never>?
    /// The one timer: sleeps on the session's clock until the next deadline (inactivity, commit interval,
    /// late records, an abort's answer), so the session wakes only for events and deadlines.
    var timer: Task<Void, Never>?
    var timerDeadline: ContinuousClock.Instant?

    init(download: MeterDownload, link: any MeterLink, meter: MeterInfo, progress: @escaping @Sendable (DownloadProgress) -> Void) {
        self.download = download
        self.link = link
        self.meter = meter
        self.progress = progress
        self.logger = download.logger
        self.clock = download.clock
        report = DownloadReport(address: meter.address, outcome: .noRecords)
        interpreter = ReadingInterpreter(
            meterAddress: meter.address, zone: MeterTimeZone(identifier: meter.timeZone), settings: download.options.clinical
        )
        let intake = DownloadIntake(batchSize: download.options.commitBatchSize, address: meter.address, logger: download.logger,
                            now: download.now, clock: download.clock, progress: progress)
        self.intake = intake
        let (stream, continuation) = AsyncStream<Input>.makeStream(bufferingPolicy: .unbounded)
        inputs = stream.makeAsyncIterator()
        self.continuation = continuation
        // In groups: a burst of notifications costs one stream element, not one each.
        let groups = link.eventGroups
        forwarder = Task {
            func tell(_ wake: DownloadIntake.Wake) {
                if wake.contains(.batchFull) {
                    continuation.yield(.batchFull)
                } else if !wake.isEmpty {
                    continuation.yield(.wake)
                }
            }
            for await group in groups {
                for event in group {
                    switch event {
                    case .value(.glucoseMeasurement, let bytes):
                        tell(intake.measurement(bytes))
                    case .value(.glucoseMeasurementContext, let bytes):
                        tell(intake.context(bytes))
                    case .value(.recordAccessControlPoint, _):
                        intake.touch(clearHold: true)
                        continuation.yield(.link(event))
                    case .value(let uuid, _) where VendorClock.characteristics.contains(uuid):
                        continuation.yield(.link(event))
                    case .value:
                        tell(intake.touch(clearHold: false))
                    case .disconnected:
                        continuation.yield(.link(event))
                    }
                }
            }
            continuation.yield(.linkEnded)
        }
    }

    deinit {
        forwarder?.cancel()
        timer?.cancel()
    }

    func run() async throws(DownloadError) -> DownloadReport {
        if interpreter.zone == nil {
            logger.warning("meter \(meter.address): time zone '\(meter.timeZone)' cannot be loaded; reading times stay unresolved")
        }
        var failure: DownloadError?
        do throws(Stop) {
            try await readMeterInformation()
            try await subscribe()
            try await procedure()
            try await flush(final: true)
        } catch {
            switch error {
            case .disconnected(let reason):
                report.outcome = .interrupted(reason: reason)
            case .timedOut:
                report.outcome = .timedOut
                // Best effort: tell the meter to stop a procedure that may still be running.
                try? await link.write(.recordAccessControlPoint, RACPRequest.abort.encoded())
            case .failed(let e):
                failure = e
            }
            if failure?.kind != .store {
                do throws(Stop) { try await flush(final: true) } catch {
                    if case .failed(let e) = error { failure = e }
                }
            }
        }
        await finishLink()
        if failure?.kind != .store {
            // Records taken in after the last commit (after the final response, or while stopping).
            do throws(Stop) { try await flush(final: true) } catch {
                if case .failed(let e) = error { failure = e }
            }
        }
        let taken = intake.snapshot
        report.received = taken.received
        report.malformed += taken.malformed
        report.undecodable = taken.undecodableCount
        if report.unmatchedContexts + taken.orphanContexts.count > 0 {
            report.unmatchedContexts += taken.orphanContexts.count
            logger.warning("meter \(meter.address): \(report.unmatchedContexts) context value(s) without a matching measurement were not kept")
        }
        if var failure {
            failure.stored = report.stored
            // A store that refused a commit (locked, full) would refuse the bookkeeping too.
            if failure.kind != .store {
                await saveBookkeeping(logging: event(.error, code: nil, "download failed: \(failure.message)"))
            }
            throw failure
        }
        // A record the meter made after it counted none (caught by the last-record check) is new:
        // the download completed, it did not find nothing.
        if report.outcome == .noRecords, report.stored > 0 { report.outcome = .completed }
        await saveBookkeeping(logging: event(.downloadFinished, code: nil,
            "\(report.outcome): \(report.received) received, \(report.stored) new, \(report.duplicates) already stored"
                + (report.conflicts > 0 ? ", \(report.conflicts) conflicting" : "")
                + (report.undecodable > 0 ? ", \(report.undecodable) undecodable kept raw" : "")))
        return report
    }

    // MARK: - Steps

    func readMeterInformation() async throws(Stop) {
        // The Glucose Feature and the Device Information strings depend on nothing read before them: one
        // round of reads, their answers taken in this order.
        let fields: [GATTUUID] = [.glucoseFeature, .manufacturerName, .modelNumber, .serialNumber, .firmwareRevision]
        let values = try await optionalReads(fields)
        if let bytes = values[0], let features = try? GlucoseFeatures(bytes: bytes) {
            report.features = features.rawValue
        }
        report.identity.manufacturer = identityString(.manufacturerName, values[1])
        report.identity.model = identityString(.modelNumber, values[2])
        report.identity.serial = identityString(.serialNumber, values[3])
        report.identity.firmware = identityString(.firmwareRevision, values[4])
        var seen = meter
        seen.apply(report.identity)
        handling = MeterHandling(for: seen)
        if !handling.isEmpty { logger.info("meter \(meter.address): handling: \(handling)") }

        var clockValue: [UInt8]?
        if await link.hasCharacteristic(.currentTime) {
            clockValue = try await optionalRead(.currentTime)
        }
        if clockValue == nil, await link.hasCharacteristic(.dateTime) {
            clockValue = try await optionalRead(.dateTime)
        }
        if clockValue == nil, let vendor = await VendorClock.characteristic(on: link) {
            clockValue = try await readVendorClock(vendor)
        }
        if let clockValue, let zone = interpreter.zone {
            if let skew = ClockSkew.measure(clockValue: clockValue, zone: zone, gatewayNow: download.now()) {
                report.skew = skew
                report.skewBeyondThreshold = skew.isBeyond(download.options.clinical.clockSkewThresholdSeconds)
                interpreter.skew = skew
                if interpreter.correctionSeconds != 0 {
                    logger.notice("meter \(meter.address): clock is off by \(skew.seconds) s; reading times are corrected")
                    await log(.clockSkew, code: skew.seconds, "meter clock off by \(skew.seconds) s; times corrected")
                    await releaseHeldReadings()
                } else if skew.isBeyond(download.options.clinical.clockSkewThresholdSeconds) {
                    await log(.clockSkew, code: skew.seconds, "meter clock off by \(skew.seconds) s; correction disabled")
                }
                try await keepMeterClockRight(skew, zone: zone, candidates: await MeterClockAccess.available(on: link))
            } else {
                logger.info("meter \(meter.address): meter clock value is not a usable date")
            }
        }
    }

    /// Readings held for their time by an earlier download of this meter (`time-in-future`, or
    /// `time-unresolved` for a meter time before 2010) whose time, corrected by the skew just measured, is
    /// now plausible: re-read from their stored bytes by the same rules, they get the corrected time and
    /// their uploads. A store failure leaves them held.
    func releaseHeldReadings() async {
        let interpreter = self.interpreter
        let handling = self.handling
        let released: [StoredReading]
        // What each reading was held as, for the log (the store returns them as now stored).
        let heldAs = Mutex<[String: ExclusionReason]>([:])
        @Sendable func key(_ r: NewReading) -> String { "\(r.sequence)|\(r.userFacingTime.isoString)" }
        do {
            released = try await download.store.releaseHeldReadings(meter.address) { held in
                heldAs.withLock { $0[key(held)] = held.exclusion }
                guard let decoded = DecodedMeasurement(held.rawMeasurement) else { return nil }
                var context: GlucoseMeasurementContext?
                if let raw = held.rawContext {
                    guard let decodedContext = try? GlucoseMeasurementContext(bytes: raw) else { return nil }
                    context = decodedContext
                }
                var fresh = handling.applied(to: interpreter.reading(decoded, context: context, rawContext: held.rawContext,
                                                                     receivedAt: held.receivedAt))
                // A meter that numbers newest first: stored under its position, not the number it sent.
                if handling.contains(.reversedSequence) { fresh.sequence = held.sequence }
                return fresh
            }
        } catch {
            logger.warning("meter \(meter.address): cannot re-evaluate readings held for their time: \(error)")
            return
        }
        for stored in released {
            let r = stored.reading
            let was = heldAs.withLock { $0[key(r)] }.map { "\($0)" } ?? "its hold"
            let time = r.instant.map { CivilCalendar.isoUTC(millis: $0) } ?? "unresolved"
            let outcome = r.exclusion.map { "still excluded as \($0)" } ?? "queued for upload"
            logger.notice("meter \(meter.address): reading \(r.sequence) released from \(was): time corrected to \(time), \(outcome)")
            await log(.readingReleased, code: r.sequence,
                      "reading \(r.sequence) released from \(was) by a clock skew of \(interpreter.correctionSeconds) s: time \(time), \(outcome)")
        }
    }

    /// Subscribes to the measurement, its context when the meter has it, and the RACP, in one round whose
    /// answers are all in before this returns: no RACP request is written before all three are on.
    func subscribe() async throws(Stop) {
        hasContextCharacteristic = await link.hasCharacteristic(.glucoseMeasurementContext)
        let uuids: [GATTUUID] = hasContextCharacteristic
            ? [.glucoseMeasurement, .glucoseMeasurementContext, .recordAccessControlPoint]
            : [.glucoseMeasurement, .recordAccessControlPoint]
        let results = await link.subscribe(uuids)
        // Every one that is on is stopped at the end, also when another failed.
        for (uuid, result) in zip(uuids, results) {
            if case .success = result, !subscribed.contains(uuid) { subscribed.append(uuid) }
        }
        for (uuid, result) in zip(uuids, results) {
            guard case .failure(let error) = result else { continue }
            if error.kind == .disconnected { throw .disconnected(error.message) }
            if uuid == .glucoseMeasurementContext {
                logger.warning("meter \(meter.address): cannot subscribe to measurement context: \(error.message)")
            } else {
                throw .failed(DownloadError(.meter, "cannot subscribe to \(uuid): \(error.message)"))
            }
        }
    }

    /// Runs the RACP procedure (see `RACPProcedure`): carries out its actions and feeds it the meter's answers.
    func procedure() async throws(Stop) {
        if handling.contains(.reversedSequence) {
            try await reversedSequenceProcedure()
            return
        }
        let highest = try await highestStoredSequence()
        highestAtStart = highest
        let largest: Int?
        do {
            largest = try await download.store.largestStoredSequence(meter.address)
        } catch {
            throw .failed(DownloadError(.store, "cannot read the stored sequences: \(error)"))
        }
        var racp = RACPProcedure()
        var actions = racp.start(highestStored: highest, largestStored: largest)
        var receivedBefore = 0
        while true {
            guard !actions.isEmpty else {
                guard racp.awaitsResponse else { throw .failed(DownloadError(.meter, "the RACP procedure stopped without an outcome")) }
                let response = try await nextRACPResponse()
                actions = racp.received(response, lastSequence: intake.snapshot.lastMeasurementSequence)
                continue
            }
            switch actions.removeFirst() {
            case .write(let request):
                let taken = intake.snapshot
                receivedBefore = taken.received + taken.malformed
                try await writeRACP(request)
            case .announceTotal(let total):
                report.total = total
                intake.setTotal(total)
            case .forgetLastSequence:
                intake.forgetLastSequence()
            case .counterWentBack(let last, let highest):
                report.counterReset = true
                logger.notice("meter \(meter.address): sequence counter went back (last \(last), stored up to \(highest)); downloading everything")
                await log(.counterReset, code: Int(last), "sequence counter went back from \(highest) to \(last); full download")
            case .awaitLateRecords(let expected):
                try await waitForLateRecords(receivedBefore: receivedBefore, expected: expected)
                actions += racp.lateRecordsOver(lastSequence: intake.snapshot.lastMeasurementSequence)
            case .log(let level, let message):
                logger.log(level, "meter \(meter.address): \(message)")
            case .finish(let outcome):
                report.outcome = outcome
                return
            case .fail(let message):
                throw .failed(DownloadError(.meter, message))
            }
        }
    }

    /// Writes an RACP request, handling ATT 0x80/0xFE (abort, retry once), 0x81/0xFD (subscribe again,
    /// retry once) and transient stack errors.
    func writeRACP(_ request: RACPRequest) async throws(Stop) {
        var abortedOnce = false
        var resubscribedOnce = false
        var transientRetries = 0
        while true {
            do {
                let mark = intake.activityMark
                try await link.write(.recordAccessControlPoint, request.encoded())
                intake.answered(since: mark)
                return
            } catch {
                if error.kind == .disconnected { throw .disconnected(error.message) }
                switch error.attError {
                case 0x80, 0xFE:
                    guard !abortedOnce else { break }
                    abortedOnce = true
                    logger.info("meter \(meter.address): a procedure is already in progress; aborting it and retrying")
                    try await abortProcedure()
                    continue
                case 0x81, 0xFD:
                    guard !resubscribedOnce else { break }
                    resubscribedOnce = true
                    logger.info("meter \(meter.address): meter reports notifications not configured; subscribing again")
                    for uuid in subscribed {
                        await link.unsubscribe(uuid)
                    }
                    subscribed.removeAll()
                    try await subscribe()
                    continue
                default:
                    if error.kind == .transient, transientRetries < 3 {
                        transientRetries += 1
                        try? await clock.sleep(until: clock.now.advanced(by: .milliseconds(100) * transientRetries))
                        continue
                    }
                }
                let code = error.attError.map { " (ATT error 0x" + String($0, radix: 16) + ")" } ?? ""
                throw .failed(DownloadError(.meter, "RACP request \(request.opCode) refused: \(error.message)\(code)"))
            }
        }
    }

    /// Sends Abort Operation and waits (bounded) for its response.
    func abortProcedure() async throws(Stop) {
        do {
            try await link.write(.recordAccessControlPoint, RACPRequest.abort.encoded())
        } catch {
            if error.kind == .disconnected { throw .disconnected(error.message) }
            logger.info("meter \(meter.address): abort refused: \(error.message)")
            return
        }
        let deadline = clock.now.advanced(by: download.options.abortResponseTimeout)
        while clock.now < deadline {
            guard let response = try await nextRACPResponse(deadline: deadline) else { return }
            if case .response(let op, _) = response, op == .abortOperation { return }
        }
    }

    /// After the response to a report: takes in records still on their way (see `LateRecordWait`).
    func waitForLateRecords(receivedBefore: Int, expected: Int?) async throws(Stop) {
        let wait = download.options.lateRecords
        let respondedAt = clock.now
        func state() -> (received: Int, lastValueAt: ContinuousClock.Instant, awaitingContext: Bool) {
            let s = intake.snapshot
            return (s.received + s.malformed - receivedBefore, s.lastActivity, s.holdsRecords)
        }
        func isOver(_ s: (received: Int, lastValueAt: ContinuousClock.Instant, awaitingContext: Bool), at now: ContinuousClock.Instant) -> Bool {
            wait.isOver(respondedAt: respondedAt, lastValueAt: s.lastValueAt, now: now, received: s.received,
                        expected: expected, awaitingContext: s.awaitingContext)
        }
        var now = state()
        if isOver(now, at: respondedAt) { return }
        if let expected, now.received < expected {
            logger.info("meter \(meter.address): the report ended before \(expected - now.received) of its \(expected) records arrived; waiting for them")
        } else {
            logger.debug("meter \(meter.address): report ended; listening for late values")
        }
        // Each late value may end the wait: the intake wakes the session for every one.
        intake.setWakeOnEveryValue(true)
        defer { intake.setWakeOnEveryValue(false) }
        while true {
            now = state()
            if isOver(now, at: clock.now) {
                if let expected, now.received < expected {
                    recordsMissing = true
                    logger.warning("meter \(meter.address): \(expected - now.received) of \(expected) announced records did not arrive; the next sync asks again")
                }
                return
            }
            arm(nextDeadline(wait.decisionTime(respondedAt: respondedAt, lastValueAt: now.lastValueAt,
                                               received: now.received, expected: expected)))
            guard let input = await inputs.next() else {
                throw .disconnected(Task.isCancelled ? "the gateway is stopping" : "link closed")
            }
            switch input {
            case .deadline:
                timerDeadline = nil
                if !isOver(state(), at: clock.now) { try await onDeadline() }
            case .wake:
                continue
            case .batchFull:
                try await flush(final: false)
            case .linkEnded, .link(.disconnected):
                now = state()
                if let expected, now.received < expected {
                    let reason: String
                    if case .link(.disconnected(let r)) = input { reason = r } else { reason = "link closed" }
                    throw .disconnected(reason)
                }
                return
            case .link(.value(let uuid, let bytes)):
                logger.debug("meter \(meter.address): RACP indication \(bytes.count) bytes on \(uuid) after the report ended; ignored")
            }
        }
    }

    // MARK: - Events

    /// Processes events until an RACP indication arrives; records and contexts are handled on the way.
    func nextRACPResponse() async throws(Stop) -> RACPResponse {
        while true {
            if let response = try await nextRACPResponse(deadline: nil) { return response }
        }
    }

    /// As above; nil when `deadline` passes first.
    func nextRACPResponse(deadline: ContinuousClock.Instant?) async throws(Stop) -> RACPResponse? {
        try await nextValue(deadline: deadline) { uuid, bytes in
            guard uuid == .recordAccessControlPoint else { return nil }
            do {
                return try RACPResponse(bytes: bytes)
            } catch {
                report.malformed += 1
                logger.warning("meter \(meter.address): malformed RACP indication: \(error)")
                return nil
            }
        }
    }

    /// Waits for the first notified value `take` turns into an answer, committing records and keeping the
    /// deadlines meanwhile; nil when `deadline` passes first. The link's end is thrown as `.disconnected`.
    func nextValue<Answer>(deadline: ContinuousClock.Instant?,
                           _ take: (GATTUUID, [UInt8]) -> Answer?) async throws(Stop) -> Answer? {
        while true {
            arm(nextDeadline(deadline))
            guard let input = await inputs.next() else {
                throw .disconnected(Task.isCancelled ? "the gateway is stopping" : "link closed")
            }
            switch input {
            case .deadline:
                timerDeadline = nil
                try await onDeadline()
                if let deadline, clock.now >= deadline { return nil }
            case .wake:
                continue
            case .linkEnded:
                throw .disconnected("link closed")
            case .link(.disconnected(let reason)):
                throw .disconnected(reason)
            case .batchFull:
                try await flush(final: false)
            case .link(.value(let uuid, let bytes)):
                if let answer = take(uuid, bytes) { return answer }
            }
        }
    }

    /// The highest sequence number stored for this meter (nil: none).
    func highestStoredSequence() async throws(Stop) -> Int? {
        do {
            return try await download.store.highestSequence(meter.address)
        } catch {
            throw .failed(DownloadError(.store, "cannot read the highest stored sequence: \(error)"))
        }
    }

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
            guard !records.isEmpty else { return }
            let batch = records.map {
                handling.applied(to: interpreter.reading($0.decoded, context: $0.context, rawContext: $0.rawContext,
                                                         receivedAt: $0.receivedAt))
            }
            do {
                let outcome = try await download.store.insertReadings(batch)
                report.stored += outcome.inserted
                report.duplicates += batch.count - outcome.inserted - outcome.conflicts.count
                await note(outcome.conflicts)
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

    func optionalRead(_ uuid: GATTUUID) async throws(Stop) -> [UInt8]? {
        guard await link.hasCharacteristic(uuid) else { return nil }
        do {
            return try await link.read(uuid)
        } catch {
            if error.kind == .disconnected { throw .disconnected(error.message) }
            logger.info("meter \(meter.address): cannot read \(uuid): \(error.message)")
            return nil
        }
    }

    /// As `optionalRead` for each of `uuids`, in one round of reads; the first lost link, in this order, stops.
    func optionalReads(_ uuids: [GATTUUID]) async throws(Stop) -> [[UInt8]?] {
        var present: [GATTUUID] = []
        for uuid in uuids where await link.hasCharacteristic(uuid) { present.append(uuid) }
        let results = await link.read(present)
        var values = [[UInt8]?](repeating: nil, count: uuids.count)
        for (uuid, result) in zip(present, results) {
            switch result {
            case .success(let bytes):
                if let index = uuids.firstIndex(of: uuid) { values[index] = bytes }
            case .failure(let error):
                if error.kind == .disconnected { throw .disconnected(error.message) }
                logger.info("meter \(meter.address): cannot read \(uuid): \(error.message)")
            }
        }
        return values
    }

    /// A Device Information string, cleaned (`IdentityText`); the bytes as sent are kept in the report when
    /// cleaning changed them.
    func identityString(_ uuid: GATTUUID, _ bytes: [UInt8]?) -> String? {
        guard let bytes else { return nil }
        let (text, changed) = IdentityText.clean(bytes)
        if changed, let field = MeterIdentity.field(uuid) { report.identity.raw[field] = IdentityText.raw(bytes) }
        return text
    }
}
