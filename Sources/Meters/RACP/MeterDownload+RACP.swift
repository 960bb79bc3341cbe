import GatewayCore
import GlucoseProfile

extension MeterDownload.Run {
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
}
