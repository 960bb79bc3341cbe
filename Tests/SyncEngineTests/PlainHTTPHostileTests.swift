import Dispatch
import Synchronization
import Testing
import TestSupport
@testable import SyncEngine
@testable import Transport
#if canImport(Glibc)
import Glibc
#endif

/// Feeds `answer` in pieces of `step` bytes; returns the first step that is not `.more`, or the end's.
private func feed(_ answer: [UInt8], step: Int, limit: Int = 1 << 20) -> AnswerReader.Step {
    var reader = AnswerReader(limit: limit)
    var at = 0
    while at < answer.count {
        let piece = answer[at..<min(answer.count, at + step)]
        at += piece.count
        let result = reader.feed(piece)
        if result != .more { return result }
    }
    return reader.end()
}

private func feed(_ answer: String, step: Int, limit: Int = 1 << 20) -> AnswerReader.Step {
    feed(Array(answer.utf8), step: step, limit: limit)
}

@Suite("Plain HTTP: answers from broken and hostile servers")
struct PlainHTTPHostileParsingTests {
    /// Interim answers and trailer lines count against the 64 KiB head limit, so a server that sends them
    /// without end is cut off with an error that says what was too long.
    @Test(arguments: [25, 4096, 16_384])
    func endlessInterimAnswersAndTrailersMeetTheHeadLimit(step: Int) {
        let interim = String(repeating: "HTTP/1.1 100 Continue\r\n\r\n", count: 3000)
        #expect(feed(interim, step: step) == .failed(.headersTooLong))
        let trailer = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n[]\r\n0\r\n" + String(repeating: "X-T: y\r\n", count: 9000)
        #expect(feed(trailer, step: step) == .failed(.headersTooLong))
        // A few interim answers before the real one are fine.
        let some = String(repeating: "HTTP/1.1 100 Continue\r\n\r\n", count: 100) + "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n[]"
        #expect(feed(some, step: step) == .complete(HTTPResponse(status: 200, headers: ["content-length": "2"], body: Array("[]".utf8)), keep: true))
    }

    @Test func anOversizedHeadSaysSo() {
        let head = "HTTP/1.1 200 OK\r\n" + String(repeating: "X-A: b\r\n", count: 10_000)
        let result = feed(head, step: 4096, limit: 39_424)
        #expect(result == .failed(.headersTooLong))
        #expect(HTTPError.headersTooLong.description == "answer headers longer than 64 KiB")
    }

    /// RFC 9112 2.2: a recipient may take a bare LF as a line end (libcurl does).
    @Test(arguments: [1, 3, 4096])
    func bareLineFeedAnswersAreRead(step: Int) {
        let length = "HTTP/1.1 200 OK\nContent-Type: application/json\nContent-Length: 5\n\n[1,2]"
        #expect(feed(length, step: step) == .complete(HTTPResponse(status: 200, headers: ["content-type": "application/json", "content-length": "5"],
                                                                   body: Array("[1,2]".utf8)), keep: true))
        let chunked = "HTTP/1.1 100 Continue\n\nHTTP/1.1 201 Created\nTransfer-Encoding: chunked\n\n3;x=y\n[1,\n2\r\n2]\n0\nTrailer: z\n\n"
        #expect(feed(chunked, step: step) == .complete(HTTPResponse(status: 201, headers: ["transfer-encoding": "chunked"],
                                                                    body: Array("[1,2]".utf8)), keep: true))
        let mixed = "HTTP/1.1 200 OK\r\nContent-Length: 2\n\r\n[]"
        #expect(feed(mixed, step: step) == .complete(HTTPResponse(status: 200, headers: ["content-length": "2"], body: Array("[]".utf8)), keep: true))
    }

    struct Case: CustomTestStringConvertible, Sendable {
        var name: String
        var answer: String
        var error: HTTPError
        var testDescription: String { name }
    }

    static let loose: [Case] = [
        Case(name: "Content-Length +2", answer: "HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\n[]", error: .other("invalid Content-Length in the answer")),
        Case(name: "Content-Length -0", answer: "HTTP/1.1 200 OK\r\nContent-Length: -0\r\n\r\n", error: .other("invalid Content-Length in the answer")),
        Case(name: "Content-Length 2 2", answer: "HTTP/1.1 200 OK\r\nContent-Length: 2 2\r\n\r\n[]", error: .other("invalid Content-Length in the answer")),
        Case(name: "Content-Length beyond Int", answer: "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n",
             error: .other("invalid Content-Length in the answer")),
        Case(name: "chunk size +2", answer: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n+2\r\n[]\r\n0\r\n\r\n", error: .other("malformed chunked answer")),
        Case(name: "chunk size ' 2 '", answer: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n 2 \r\n[]\r\n0\r\n\r\n", error: .other("malformed chunked answer")),
        Case(name: "chunk size '2 '", answer: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2 \r\n[]\r\n0\r\n\r\n", error: .other("malformed chunked answer")),
        Case(name: "chunk size 0x2", answer: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x2\r\n[]\r\n0\r\n\r\n", error: .other("malformed chunked answer")),
        Case(name: "chunk size of 16 hex digits", answer: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n", error: .other("malformed chunked answer")),
        Case(name: "status 0200", answer: "HTTP/1.1 0200 OK\r\nContent-Length: 0\r\n\r\n", error: .other("not an HTTP answer")),
        Case(name: "status +200", answer: "HTTP/1.1 +200 OK\r\nContent-Length: 0\r\n\r\n", error: .other("not an HTTP answer")),
        Case(name: "status 099", answer: "HTTP/1.1 099 OK\r\nContent-Length: 0\r\n\r\n", error: .other("not an HTTP answer")),
    ]

    /// Numbers are digits only: no sign, no blanks, no leading-zero status.
    @Test(arguments: loose)
    func looseNumbersAreRefused(_ c: Case) {
        #expect(feed(c.answer, step: 4096) == .failed(c.error))
    }

    /// A chunk extension may follow the size after blanks (RFC 9112 7.1.1, BWS before `;`).
    @Test func aChunkExtensionAfterBlanksIsRead() {
        let answer = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2 ;name=value\r\n[]\r\n0\r\n\r\n"
        #expect(feed(answer, step: 5) == .complete(HTTPResponse(status: 200, headers: ["transfer-encoding": "chunked"], body: Array("[]".utf8)), keep: true))
    }
}
