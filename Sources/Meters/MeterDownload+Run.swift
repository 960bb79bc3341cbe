import GatewayCore
import GlucoseProfile
import Support
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

extension MeterDownload {
    /// The state of one running download. Lives inside the caller's task only.
    final class Run {
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
        /// The meter's clock against UTC and where this download's records lie in time (`MeterClockTrack`).
        var meterClock = MeterClockTrack()

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

            // When the clock was asked for and when its answer came: the meter read it in between.
            var clockValue: [UInt8]?
            var clockAsked = download.now()
            if await link.hasCharacteristic(.currentTime) {
                clockAsked = download.now()
                clockValue = try await optionalRead(.currentTime)
            }
            if clockValue == nil, await link.hasCharacteristic(.dateTime) {
                clockAsked = download.now()
                clockValue = try await optionalRead(.dateTime)
            }
            if clockValue == nil, let vendor = await VendorClock.characteristic(on: link) {
                (clockValue, clockAsked) = try await readVendorClock(vendor)
            }
            let clockAnswered = download.now()
            if let clockValue, let zone = interpreter.zone {
                if let skew = ClockSkew.measure(clockValue: clockValue, zone: zone, asked: clockAsked, answered: clockAnswered) {
                    report.skew = skew
                    report.skewBeyondThreshold = skew.isBeyond(download.options.clinical.clockSkewThresholdSeconds)
                    interpreter.skew = skew
                    await measureClock(skew.meterClock, asked: clockAsked, answered: clockAnswered, zone: zone)
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
            // Where each was placed by the clock history, to keep beside those released.
            let placedAs = Mutex<[String: ClockPlacement]>([:])
            do {
                let place = try await heldReadingPlacer()
                released = try await download.store.releaseHeldReadings(meter.address) { held in
                    heldAs.withLock { $0[key(held)] = held.exclusion }
                    guard let decoded = DecodedMeasurement(held.rawMeasurement) else { return nil }
                    var context: GlucoseMeasurementContext?
                    if let raw = held.rawContext {
                        guard let decodedContext = try? GlucoseMeasurementContext(bytes: raw) else { return nil }
                        context = decodedContext
                    }
                    let m = decoded.measurement
                    let placement = decoded.timeUsable ? place?(ClockRecord(sequence: held.sequence, userFacing: m.userFacingTime,
                                                                            timeOffsetMinutes: Int(m.timeOffset ?? 0)), held.receivedAt) : nil
                    if let placement { placedAs.withLock { $0[key(held)] = placement } }
                    var fresh = handling.applied(to: interpreter.reading(decoded, context: context, rawContext: held.rawContext,
                                                                         receivedAt: held.receivedAt, placement: placement))
                    // A meter that numbers newest first: stored under its position, not the number it sent.
                    if handling.contains(.reversedSequence) { fresh.sequence = held.sequence }
                    return fresh
                }
            } catch {
                logger.warning("meter \(meter.address): cannot re-evaluate readings held for their time: \(error)")
                return
            }
            let placements = placedAs.withLock { $0 }
            for stored in released {
                let r = stored.reading
                let was = heldAs.withLock { $0[key(r)] }.map { "\($0)" } ?? "its hold"
                let time = r.instant.map { CivilCalendar.isoUTC(millis: $0) } ?? "unresolved"
                let outcome = r.exclusion.map { "still excluded as \($0)" } ?? "queued for upload"
                let by = placements[key(r)].flatMap { $0.stored(sequence: r.sequence, userFacingTime: r.userFacingTime)?.summary }
                    .map { "by the meter's clock history (\($0))" } ?? "by a clock skew of \(interpreter.correctionSeconds) s"
                logger.notice("meter \(meter.address): reading \(r.sequence) released from \(was): time corrected to \(time), \(outcome)")
                await log(.readingReleased, code: r.sequence, "reading \(r.sequence) released from \(was) \(by): time \(time), \(outcome)")
            }
            await rememberPlacements(released.map { ($0.reading, placements[key($0.reading)]) })
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
}
