import GatewayCore
import GlucoseProfile
import Testing
@testable import Gateway

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

    @Test func theTopOfTheSequenceRangeGoesStraightToTheLastRecordCheck() {
        var p = RACPProcedure()
        #expect(p.start(highestStored: Int(UInt16.max)) == [.forgetLastSequence, .write(.reportRecords(.lastRecord))])
        // A stored sequence no meter could send is never converted into one.
        var q = RACPProcedure()
        #expect(q.start(highestStored: -3) == [.forgetLastSequence, .write(.reportRecords(.lastRecord))])
    }

    @Test func aMeterWithoutALastRecordQueryEndsWithNothingNew() {
        var p = RACPProcedure()
        _ = p.start(highestStored: Int(UInt16.max))
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
        #expect(p.received(Self.answer(.reportStoredRecords, code), lastSequence: nil) == [.fail("meter ended the report with \(code)")])
        #expect(p.state == .finished)
    }

    @Test func anotherCodeFailsTheReport() {
        var p = RACPProcedure()
        _ = p.start(highestStored: nil)
        _ = p.received(.numberOfRecords(3), lastSequence: nil)
        #expect(p.received(Self.answer(.reportStoredRecords, .procedureNotCompleted), lastSequence: nil)
                == [.fail("meter ended the report with procedure_not_completed")])
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
