import GatewayCore
import GlucoseProfile

/// The Record Access Control Point procedure of one download, as a value: events in, actions out, no I/O.
///
/// It decides which request to write and what each answer means; the session writes the requests, takes in
/// the records, commits them and runs the timers. The procedure:
/// - Nothing stored for the meter yet: count all records, then report all of them (none: nothing new).
/// - Otherwise count from the highest stored sequence + 1, then report from there. A meter that refuses the
///   filtered report gets a full report (the store keeps each reading once).
/// - When nothing is newer (or the highest stored sequence is the top of the range), report the meter's last
///   record: a sequence below the highest stored means the counter went back, and everything is counted and
///   reported again.
/// - A report ends with "success" (then the session listens for records still on their way, see
///   `LateRecordWait`), "no records found" (a normal end), or another code (the download fails).
///
/// Each event returns the actions to carry out in order. After them, while `awaitsResponse`, the next RACP
/// response goes to `received(_:lastSequence:)`; after `awaitLateRecords`, the end of the wait goes to
/// `lateRecordsOver(lastSequence:)`. The procedure is over with `finish` or `fail`.
struct RACPProcedure: Sendable, Equatable {
    enum Action: Sendable, Equatable {
        /// Write this request to the control point.
        case write(RACPRequest)
        /// The meter announced this many records (nil: it cannot count them).
        case announceTotal(Int?)
        /// Forget the last sequence received, so that the last-record check sees only its own record.
        case forgetLastSequence
        /// The meter's last record is below what is stored: its counter went back.
        case counterWentBack(last: UInt16, highestStored: Int)
        /// Listen for records of the report that ended, `expected` of them in all (nil: unknown).
        case awaitLateRecords(expected: Int?)
        case log(LogLevel, String)
        /// The procedure is over.
        case finish(DownloadOutcome)
        /// The meter refused or broke the procedure.
        case fail(String)
    }

    /// What a count or a report is for.
    enum Purpose: Sendable, Equatable {
        /// The download itself.
        case download
        /// Comparing the meter's last record with the highest stored sequence.
        case lastRecordCheck(highestStored: Int)
    }

    enum State: Sendable, Equatable {
        case idle
        /// Waiting for the answer to a count request; `from` is the first sequence asked for (nil: all).
        case counting(from: UInt16?, highestStored: Int?)
        case reporting(RACPRequest, fallbackToAll: Bool, purpose: Purpose)
        case awaitingLateRecords(purpose: Purpose)
        case finished
    }

    /// Codes with which a meter says it cannot do a request as asked.
    static let refusals: Set<RACPResponseCode> = [
        .opCodeNotSupported, .operatorNotSupported, .operandNotSupported, .invalidOperator, .invalidOperand,
    ]

    private(set) var state: State = .idle
    /// The meter's answer to the last count request.
    private(set) var total: Int?

    init() {}

    /// Whether the procedure waits for the meter's answer to the request it wrote last.
    var awaitsResponse: Bool {
        switch state {
        case .counting, .reporting: true
        case .idle, .awaitingLateRecords, .finished: false
        }
    }

    /// The download starts; `highestStored` is the highest sequence stored for the meter (nil: none yet).
    mutating func start(highestStored: Int?) -> [Action] {
        guard state == .idle else { return [] }
        guard let highest = highestStored else { return countAll() }
        guard highest < Int(UInt16.max), let from = UInt16(exactly: highest + 1) else {
            return checkLastRecord(highestStored: highest)
        }
        state = .counting(from: from, highestStored: highest)
        return [.write(.reportNumberFrom(sequence: from))]
    }

    /// An RACP response arrived; `lastSequence` is the sequence of the last record received, if any.
    mutating func received(_ response: RACPResponse, lastSequence: UInt16?) -> [Action] {
        switch state {
        case .counting(let from, let highest):
            switch response {
            case .numberOfRecords(let n):
                return counted(Int(n), from: from, highestStored: highest)
            case .response(let op, let code) where op == .reportNumberOfStoredRecords:
                if code == .noRecordsFound { return counted(0, from: from, highestStored: highest) }
                return [.log(.info, "count request answered \(code); downloading without a total")]
                    + counted(nil, from: from, highestStored: highest)
            case .response(let op, let code):
                return [.log(.debug, "ignoring RACP response \(code) to \(op)")]
            }
        case .reporting(let request, let fallbackToAll, let purpose):
            switch response {
            case .numberOfRecords:
                return []
            case .response(let op, let code) where op == .reportStoredRecords:
                if code == .success {
                    state = .awaitingLateRecords(purpose: purpose)
                    let single = request.operator == .lastRecord || request.operator == .firstRecord
                    return [.awaitLateRecords(expected: single ? 1 : total)]
                }
                if code == .noRecordsFound { return reportEnded(.noRecords, purpose: purpose, lastSequence: lastSequence) }
                if Self.refusals.contains(code), fallbackToAll {
                    state = .reporting(.reportAll, fallbackToAll: false, purpose: purpose)
                    return [.log(.info, "filtered report refused (\(code)); downloading everything"), .write(.reportAll)]
                }
                if Self.refusals.contains(code), request.operator == .lastRecord {
                    // No way to ask for the last record: the check has only what arrived meanwhile.
                    return reportEnded(.noRecords, purpose: purpose, lastSequence: lastSequence)
                }
                state = .finished
                return [.fail("meter ended the report with \(code)")]
            case .response(let op, let code):
                return [.log(.debug, "ignoring RACP response \(code) to \(op)")]
            }
        case .idle, .awaitingLateRecords, .finished:
            return []
        }
    }

    /// The records still on their way after a successful report are in, or waiting for them is over.
    mutating func lateRecordsOver(lastSequence: UInt16?) -> [Action] {
        guard case .awaitingLateRecords(let purpose) = state else { return [] }
        return reportEnded(.completed, purpose: purpose, lastSequence: lastSequence)
    }

    // MARK: - Steps

    private mutating func countAll() -> [Action] {
        state = .counting(from: nil, highestStored: nil)
        return [.write(.reportNumberAll)]
    }

    private mutating func checkLastRecord(highestStored: Int) -> [Action] {
        state = .reporting(.reportRecords(.lastRecord), fallbackToAll: false, purpose: .lastRecordCheck(highestStored: highestStored))
        return [.forgetLastSequence, .write(.reportRecords(.lastRecord))]
    }

    private mutating func counted(_ count: Int?, from: UInt16?, highestStored: Int?) -> [Action] {
        guard let from, let highestStored else {
            // Counting everything.
            total = count
            if count == 0 {
                state = .finished
                return [.announceTotal(count), .finish(.noRecords)]
            }
            state = .reporting(.reportAll, fallbackToAll: false, purpose: .download)
            return [.announceTotal(count), .write(.reportAll)]
        }
        if count == 0 { return checkLastRecord(highestStored: highestStored) }
        total = count
        let request = RACPRequest.reportFrom(sequence: from)
        state = .reporting(request, fallbackToAll: true, purpose: .download)
        return [.announceTotal(count), .write(request)]
    }

    private mutating func reportEnded(_ outcome: DownloadOutcome, purpose: Purpose, lastSequence: UInt16?) -> [Action] {
        switch purpose {
        case .download:
            state = .finished
            return [.finish(outcome)]
        case .lastRecordCheck(let highest):
            if let last = lastSequence, Int(last) < highest {
                return [.counterWentBack(last: last, highestStored: highest)] + countAll()
            }
            state = .finished
            return [.finish(.noRecords)]
        }
    }
}
