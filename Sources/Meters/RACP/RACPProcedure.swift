import GatewayCore
import GlucoseProfile
import Support

/// The Record Access Control Point procedure of one download, as a value: events in, actions out, no I/O.
///
/// It decides which request to write and what each answer means; the session writes the requests, takes in
/// the records, commits them and runs the timers. The procedure:
/// - Nothing stored for the meter yet: count all records, then report all of them (none: nothing new).
/// - Otherwise count from the meter's counter position P + 1 (the newest record downloaded, see
///   `SequencePosition`), then report from there. A meter that refuses the filtered report gets a full
///   report (the store keeps each reading once).
/// - The counter is 16 bits and wraps: the numbers that can be new are the next 32767 after P, going round
///   from 65535 to 0. When stored readings have numbers beyond that window (they came before a wrap, and
///   the meter may still hold them), only the window is asked for (within range), not `>= P + 1`, which
///   would bring them again on every sync. When a report from P + 1 reaches 65535 and the window goes
///   round, or P is 65535 itself, the numbers after the wrap (from 0) are counted and reported next.
/// - When nothing is newer, report the meter's last record: a sequence below P means the counter went
///   back (a reset), and everything is counted and reported again.
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
        /// The download itself; `highestStored` is the counter position it starts from (nil: everything).
        case download(highestStored: Int?)
        /// The numbers after the counter wrapped (from 0), after a download that reached 65535 or from
        /// position 65535; `afterReport` when a report before it brought records.
        case pastWrap(highestStored: Int, afterReport: Bool)
        /// Comparing the meter's last record with the highest stored sequence.
        case lastRecordCheck(highestStored: Int)
    }

    enum State: Sendable, Equatable {
        case idle
        /// Waiting for the answer to a count request; `report` is the report that follows a non-zero count.
        case counting(report: RACPRequest, purpose: Purpose)
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
    /// The counts of the reports before the current one (a download past the wrap has two).
    private var announcedBefore = 0

    init() {}

    /// Whether the procedure waits for the meter's answer to the request it wrote last.
    var awaitsResponse: Bool {
        switch state {
        case .counting, .reporting: true
        case .idle, .awaitingLateRecords, .finished: false
        }
    }

    /// The download starts; `highestStored` is the meter's counter position (nil: nothing stored yet, -1:
    /// from sequence 0), `largestStored` the largest sequence among its stored readings.
    mutating func start(highestStored: Int?, largestStored: Int? = nil) -> [Action] {
        guard state == .idle else { return [] }
        // A position no 16-bit counter has (a damaged database) is unknown: everything, kept once.
        guard let highest = highestStored, SequencePosition.isValid(highest) else { return countAll() }
        guard highest < Int(UInt16.max), let from = UInt16(exactly: highest + 1) else {
            return countPastWrap(highestStored: highest, afterReport: false)
        }
        let windowEnd = highest + SequencePosition.window
        if highest >= 0, windowEnd <= Int(UInt16.max), let largest = largestStored, largest > windowEnd,
           let to = UInt16(exactly: windowEnd) {
            // Readings from before a wrap: `>= from` would bring them again.
            return count(.sequenceNumber(min: from, max: to), op: .withinRange, purpose: .download(highestStored: highest))
        }
        return count(.sequenceNumber(min: from, max: nil), op: .greaterThanOrEqual, purpose: .download(highestStored: highest))
    }

    /// An RACP response arrived; `lastSequence` is the sequence of the last record received, if any.
    mutating func received(_ response: RACPResponse, lastSequence: UInt16?) -> [Action] {
        switch state {
        case .counting(let report, let purpose):
            switch response {
            case .numberOfRecords(let n):
                return counted(Int(n), report: report, purpose: purpose)
            case .response(let op, let code) where op == .reportNumberOfStoredRecords:
                if code == .noRecordsFound { return counted(0, report: report, purpose: purpose) }
                return [.log(.info, "count request answered \(code); downloading without a total")]
                    + counted(nil, report: report, purpose: purpose)
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
                return [.fail(code.failureText)]
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
        state = .counting(report: .reportAll, purpose: .download(highestStored: nil))
        return [.write(.reportNumberAll)]
    }

    private mutating func count(_ operand: RACPOperand, op: RACPOperator, purpose: Purpose) -> [Action] {
        state = .counting(report: .reportRecords(op, operand), purpose: purpose)
        return [.write(.reportNumberOfRecords(op, operand))]
    }

    /// Counts the numbers from 0 up to the end of the window after `highestStored` (the part of it past
    /// the wrap).
    private mutating func countPastWrap(highestStored: Int, afterReport: Bool) -> [Action] {
        let end = highestStored + SequencePosition.window - (Int(UInt16.max) + 1)
        guard end >= 0, let to = UInt16(exactly: end) else {
            state = .finished
            return [.finish(afterReport ? .completed : .noRecords)]
        }
        return count(.sequenceNumber(min: 0, max: to), op: .withinRange,
                     purpose: .pastWrap(highestStored: highestStored, afterReport: afterReport))
    }

    private mutating func checkLastRecord(highestStored: Int) -> [Action] {
        state = .reporting(.reportRecords(.lastRecord), fallbackToAll: false, purpose: .lastRecordCheck(highestStored: highestStored))
        return [.forgetLastSequence, .write(.reportRecords(.lastRecord))]
    }

    private mutating func counted(_ count: Int?, report: RACPRequest, purpose: Purpose) -> [Action] {
        switch purpose {
        case .download(nil):
            // Counting everything.
            total = count
            if count == 0 {
                state = .finished
                return [.announceTotal(count), .finish(.noRecords)]
            }
            state = .reporting(.reportAll, fallbackToAll: false, purpose: purpose)
            return [.announceTotal(count), .write(.reportAll)]
        case .download(let highest?), .pastWrap(let highest, afterReport: false):
            if count == 0 { return checkLastRecord(highestStored: highest) }
        case .pastWrap(_, afterReport: true):
            if count == 0 {
                state = .finished
                return [.finish(.completed)]
            }
        case .lastRecordCheck:
            break
        }
        total = count
        state = .reporting(report, fallbackToAll: true, purpose: purpose)
        // The progress total covers the reports before this one too.
        let announced = count.map { n in announcedBefore.addingReportingOverflow(n).partialValue }
        if let n = count { announcedBefore = announcedBefore.addingReportingOverflow(n).partialValue }
        return [.announceTotal(announced), .write(report)]
    }

    private mutating func reportEnded(_ outcome: DownloadOutcome, purpose: Purpose, lastSequence: UInt16?) -> [Action] {
        switch purpose {
        case .download(let highest?) where outcome == .completed && lastSequence == UInt16.max:
            // The report reached the top of the range: the counter may have gone round since.
            return countPastWrap(highestStored: highest, afterReport: true)
        case .download:
            state = .finished
            return [.finish(outcome)]
        case .pastWrap(_, let afterReport):
            state = .finished
            return [.finish(afterReport ? .completed : outcome)]
        case .lastRecordCheck(let highest):
            if let last = lastSequence, Int(last) < highest {
                return [.counterWentBack(last: last, highestStored: highest)] + countAll()
            }
            state = .finished
            return [.finish(.noRecords)]
        }
    }
}
