import GatewayCore
import GlucoseProfile
import Testing
@testable import Meters

/// The RACP procedure as a value: each test feeds events and checks the actions, with no link and no clock.
@Suite("RACP procedure")
struct RACPProcedureTests {
    typealias Action = RACPProcedure.Action

    static func success(_ op: RACPOpCode = .reportStoredRecords) -> RACPResponse { .response(requestOpCode: op, code: .success) }
    static func answer(_ op: RACPOpCode, _ code: RACPResponseCode) -> RACPResponse { .response(requestOpCode: op, code: code) }

    @Test func firstSyncCountsAllThenReportsAll() {
        var p = RACPProcedure()
        #expect(p.start(highestStored: nil) == [.write(.reportNumberAll)])
        #expect(p.awaitsResponse)
        #expect(p.received(.numberOfRecords(12), lastSequence: nil) == [.announceTotal(12), .write(.reportAll)])
        #expect(p.received(Self.success(), lastSequence: 11) == [.awaitLateRecords(expected: 12)])
        #expect(!p.awaitsResponse)
        #expect(p.lateRecordsOver(lastSequence: 11) == [.finish(.completed)])
        #expect(p.state == .finished)
    }

    @Test func anEmptyMeterEndsWithoutAReport() {
        var p = RACPProcedure()
        _ = p.start(highestStored: nil)
        #expect(p.received(.numberOfRecords(0), lastSequence: nil) == [.announceTotal(0), .finish(.noRecords)])
    }

    @Test func incrementalSyncCountsAndReportsFromHighestPlusOne() {
        var p = RACPProcedure()
        #expect(p.start(highestStored: 41) == [.write(.reportNumberFrom(sequence: 42))])
        #expect(p.received(.numberOfRecords(3), lastSequence: nil) == [.announceTotal(3), .write(.reportFrom(sequence: 42))])
        #expect(p.received(Self.success(), lastSequence: 44) == [.awaitLateRecords(expected: 3)])
        #expect(p.lateRecordsOver(lastSequence: 44) == [.finish(.completed)])
    }

    @Test func noRecordsFoundEndsAReportNormally() {
        var p = RACPProcedure()
        _ = p.start(highestStored: 41)
        _ = p.received(.numberOfRecords(3), lastSequence: nil)
        #expect(p.received(Self.answer(.reportStoredRecords, .noRecordsFound), lastSequence: nil) == [.finish(.noRecords)])
    }

    @Test func aMeterThatCannotCountIsReportedWithoutATotal() {
        var p = RACPProcedure()
        _ = p.start(highestStored: 41)
        let actions = p.received(Self.answer(.reportNumberOfStoredRecords, .opCodeNotSupported), lastSequence: nil)
        #expect(actions == [.log(.info, "count request answered op_code_not_supported; downloading without a total"),
                            .announceTotal(nil), .write(.reportFrom(sequence: 42))])
        #expect(p.received(Self.success(), lastSequence: 50) == [.awaitLateRecords(expected: nil)])
    }

    @Test func nothingNewChecksTheLastRecordAndEndsWhenTheCounterHeld() {
        var p = RACPProcedure()
        _ = p.start(highestStored: 41)
        #expect(p.received(Self.answer(.reportNumberOfStoredRecords, .noRecordsFound), lastSequence: nil)
                == [.forgetLastSequence, .write(.reportRecords(.lastRecord))])
        #expect(p.received(Self.success(), lastSequence: 41) == [.awaitLateRecords(expected: 1)])
        #expect(p.lateRecordsOver(lastSequence: 41) == [.finish(.noRecords)])
    }

    @Test func aLastRecordBelowTheStoredHighestMeansTheCounterWentBack() {
        var p = RACPProcedure()
        _ = p.start(highestStored: 41)
        _ = p.received(.numberOfRecords(0), lastSequence: nil)
        _ = p.received(Self.success(), lastSequence: nil)
        #expect(p.lateRecordsOver(lastSequence: 4) == [.counterWentBack(last: 4, highestStored: 41), .write(.reportNumberAll)])
        #expect(p.received(.numberOfRecords(5), lastSequence: 4) == [.announceTotal(5), .write(.reportAll)])
        #expect(p.received(Self.success(), lastSequence: 4) == [.awaitLateRecords(expected: 5)])
        #expect(p.lateRecordsOver(lastSequence: 4) == [.finish(.completed)])
    }

    static func range(_ min: UInt16, _ max: UInt16) -> RACPOperand { .sequenceNumber(min: min, max: max) }

    @Test func theTopOfTheSequenceRangeCountsPastTheWrap() {
        var p = RACPProcedure()
        // After 65535 the counter goes on from 0: the next 32767 numbers are the ones that can be new.
        #expect(p.start(highestStored: Int(UInt16.max)) == [.write(.reportNumberOfRecords(.withinRange, Self.range(0, 32766)))])
        #expect(p.received(.numberOfRecords(4), lastSequence: nil)
                == [.announceTotal(4), .write(.reportRecords(.withinRange, Self.range(0, 32766)))])
        #expect(p.received(Self.success(), lastSequence: 3) == [.awaitLateRecords(expected: 4)])
        #expect(p.lateRecordsOver(lastSequence: 3) == [.finish(.completed)])
    }

    @Test func nothingPastTheWrapFallsBackToTheLastRecordCheck() {
        var p = RACPProcedure()
        _ = p.start(highestStored: Int(UInt16.max))
        #expect(p.received(.numberOfRecords(0), lastSequence: nil) == [.forgetLastSequence, .write(.reportRecords(.lastRecord))])
        #expect(p.received(Self.success(), lastSequence: 65535) == [.awaitLateRecords(expected: 1)])
        #expect(p.lateRecordsOver(lastSequence: 65535) == [.finish(.noRecords)])
    }

    @Test func aReportThatReachesTheTopGoesOnPastTheWrap() {
        var p = RACPProcedure()
        #expect(p.start(highestStored: 65533) == [.write(.reportNumberFrom(sequence: 65534))])
        _ = p.received(.numberOfRecords(2), lastSequence: nil)
        #expect(p.received(Self.success(), lastSequence: 65535) == [.awaitLateRecords(expected: 2)])
        // 65534 + 32767 goes round to 32764.
        #expect(p.lateRecordsOver(lastSequence: 65535) == [.write(.reportNumberOfRecords(.withinRange, Self.range(0, 32764)))])
        // The progress total counts both reports.
        #expect(p.received(.numberOfRecords(3), lastSequence: 65535)
                == [.announceTotal(5), .write(.reportRecords(.withinRange, Self.range(0, 32764)))])
        #expect(p.received(Self.success(), lastSequence: 2) == [.awaitLateRecords(expected: 3)])
        #expect(p.lateRecordsOver(lastSequence: 2) == [.finish(.completed)])
    }

    @Test func aReportThatReachesTheTopWithNothingPastTheWrapIsComplete() {
        var p = RACPProcedure()
        _ = p.start(highestStored: 65533)
        _ = p.received(.numberOfRecords(2), lastSequence: nil)
        _ = p.received(Self.success(), lastSequence: 65535)
        _ = p.lateRecordsOver(lastSequence: 65535)
        #expect(p.received(.numberOfRecords(0), lastSequence: 65535) == [.finish(.completed)])
    }

    @Test func aReportBelowTheTopDoesNotLookPastTheWrap() {
        var p = RACPProcedure()
        _ = p.start(highestStored: 40000)
        _ = p.received(.numberOfRecords(2), lastSequence: nil)
        _ = p.received(Self.success(), lastSequence: 40002)
        #expect(p.lateRecordsOver(lastSequence: 40002) == [.finish(.completed)])
    }

    @Test func readingsFromBeforeAWrapAreNotAskedForAgain() {
        var p = RACPProcedure()
        // Position 3 after a wrap, readings up to 65535 stored: only 4...32770 can be new.
        #expect(p.start(highestStored: 3, largestStored: 65535) == [.write(.reportNumberOfRecords(.withinRange, Self.range(4, 32770)))])
        #expect(p.received(.numberOfRecords(1), lastSequence: nil)
                == [.announceTotal(1), .write(.reportRecords(.withinRange, Self.range(4, 32770)))])
        // Stored readings inside the window change nothing.
        var q = RACPProcedure()
        #expect(q.start(highestStored: 3, largestStored: 32770) == [.write(.reportNumberFrom(sequence: 4))])
    }

    @Test func aStoredPositionNoCounterHasDownloadsEverything() {
        // A damaged database: never converted into a sequence, and nothing is skipped (the store keeps each once).
        for bad in [-3, 65536, Int.max, Int.min] {
            var p = RACPProcedure()
            #expect(p.start(highestStored: bad, largestStored: Int.max) == [.write(.reportNumberAll)])
        }
    }

    @Test func aMeterWithoutALastRecordQueryEndsWithNothingNew() {
        var p = RACPProcedure()
        _ = p.start(highestStored: Int(UInt16.max))
        _ = p.received(.numberOfRecords(0), lastSequence: nil)
        #expect(p.received(Self.answer(.reportStoredRecords, .operatorNotSupported), lastSequence: nil) == [.finish(.noRecords)])
    }

    @Test(arguments: [RACPResponseCode.opCodeNotSupported, .operatorNotSupported, .operandNotSupported, .invalidOperator, .invalidOperand])
    func aRefusedFilteredReportFallsBackToEverythingOnce(_ code: RACPResponseCode) {
        var p = RACPProcedure()
        _ = p.start(highestStored: 41)
        _ = p.received(.numberOfRecords(3), lastSequence: nil)
        #expect(p.received(Self.answer(.reportStoredRecords, code), lastSequence: nil)
                == [.log(.info, "filtered report refused (\(code)); downloading everything"), .write(.reportAll)])
        // The full report keeps the filtered count as what it expects; a second refusal fails.
        #expect(p.received(Self.answer(.reportStoredRecords, code), lastSequence: nil) == [.fail(code.failureText)])
        #expect(p.state == .finished)
    }

    @Test func anotherCodeFailsTheReport() {
        var p = RACPProcedure()
        _ = p.start(highestStored: nil)
        _ = p.received(.numberOfRecords(3), lastSequence: nil)
        #expect(p.received(Self.answer(.reportStoredRecords, .procedureNotCompleted), lastSequence: nil)
                == [.fail("the meter stopped before sending every record (RACP procedure not completed)")])
    }

    @Test func aFailedReportIsToldInWordsNotInTheCodeName() {
        var p = RACPProcedure()
        _ = p.start(highestStored: nil)
        _ = p.received(.numberOfRecords(3), lastSequence: nil)
        #expect(p.received(Self.answer(.reportStoredRecords, .opCodeNotSupported), lastSequence: nil)
                == [.fail("the meter does not support this request (RACP op code not supported)")])
        // Every code, known or not: words, one line, never the specification's identifier.
        var seen: Set<String> = []
        for raw in UInt8(0)...UInt8(255) {
            let code = RACPResponseCode(rawValue: raw)
            let text = code.failureText
            #expect(text.hasPrefix("the meter "))
            #expect(!text.contains("_") && !text.contains("\n"))
            seen.insert(text)
        }
        // The nine defined codes each have their own text, the others share one shape.
        #expect(seen.count == 9 + 247)
    }

    @Test func answersToOtherRequestsAreIgnoredAndTheProcedureWaitsOn() {
        var p = RACPProcedure()
        _ = p.start(highestStored: nil)
        #expect(p.received(Self.answer(.abortOperation, .success), lastSequence: nil)
                == [.log(.debug, "ignoring RACP response success to abort_operation")])
        #expect(p.awaitsResponse)
        _ = p.received(.numberOfRecords(2), lastSequence: nil)
        // A count while reporting is no answer to the report.
        #expect(p.received(.numberOfRecords(7), lastSequence: nil) == [])
        #expect(p.awaitsResponse)
        #expect(p.received(Self.success(), lastSequence: 1) == [.awaitLateRecords(expected: 2)])
    }

    @Test func eventsOutOfTurnChangeNothing() {
        var p = RACPProcedure()
        #expect(p.received(.numberOfRecords(3), lastSequence: nil) == [])
        #expect(p.lateRecordsOver(lastSequence: nil) == [])
        #expect(p.state == .idle)
        _ = p.start(highestStored: nil)
        #expect(p.start(highestStored: 5) == [])
        #expect(p.lateRecordsOver(lastSequence: nil) == [])
        _ = p.received(.numberOfRecords(0), lastSequence: nil)
        #expect(p.received(Self.success(), lastSequence: nil) == [])
        #expect(p.state == .finished)
    }
}
