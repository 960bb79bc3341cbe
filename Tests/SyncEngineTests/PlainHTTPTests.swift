import Dispatch
import Synchronization
import Testing
import TestSupport
@testable import SyncEngine
@testable import Transport
#if canImport(Glibc)
import Glibc
#endif

@Suite("Plain HTTP: URLs it takes, answers it parses")
struct PlainHTTPParsingTests {
    @Test func urlsItTakesAndLeavesToLibcurl() {
        let t = PlainHTTPTarget(url: "http://127.0.0.1:1337/api/v1/entries")
        #expect(t?.host == "127.0.0.1" && t?.port == 1337 && t?.target == "/api/v1/entries" && t?.authority == "127.0.0.1:1337")
        #expect(PlainHTTPTarget(url: "HTTP://ns.local")?.target == "/")
        #expect(PlainHTTPTarget(url: "http://ns.local")?.port == 80)
        #expect(PlainHTTPTarget(url: "http://ns.local?token=x")?.target == "/?token=x")
        for url in ["https://ns.example/api", "http://user:pw@ns.local/", "http://[::1]:80/", "http://ns.local/a#b",
                    "http://ns.local:0/", "http://ns.local:99999/", "http:///path", "ftp://ns.local/", "http://ns.local/a b"] {
            #expect(PlainHTTPTarget(url: url) == nil, "\(url)")
        }
    }

    @Test func requestCarriesHostLengthAndDropsEmptyHeaders() {
        let target = PlainHTTPTarget(url: "http://127.0.0.1:8080/api/v1/entries")!
        let request = HTTPRequest(method: "POST", url: "http://127.0.0.1:8080/api/v1/entries",
                                  headers: [("api-secret", "abc"), ("Expect", ""), ("Bad\r\nHeader", "x")],
                                  body: Array("[]".utf8), connectTimeoutMs: 100, timeoutMs: 100)
        let text = String(decoding: SocketHTTPClient.encode(request, target), as: UTF8.self)
        #expect(text == "POST /api/v1/entries HTTP/1.1\r\nHost: 127.0.0.1:8080\r\napi-secret: abc\r\nAccept: */*\r\nContent-Length: 2\r\n\r\n[]")
    }

    /// Feeds `answer` in pieces of `step` bytes; returns the last step.
    func feed(_ answer: String, step: Int, limit: Int = 1 << 20) -> AnswerReader.Step {
        var reader = AnswerReader(limit: limit)
        let bytes = Array(answer.utf8)
        var at = 0
        while at < bytes.count {
            let piece = bytes[at..<min(bytes.count, at + step)]
            at += piece.count
            let step = reader.feed(piece)
            if step != .more { return step }
        }
        return reader.end()
    }

    @Test(arguments: [1, 2, 7, 4096])
    func lengthChunkedInterimAndCloseDelimited(step: Int) {
        let length = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\n[1,2]"
        #expect(feed(length, step: step) == .complete(HTTPResponse(status: 200, headers: ["content-type": "application/json", "content-length": "5"], body: Array("[1,2]".utf8)), keep: true))
        let chunked = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\n[1,\r\n2\r\n2]\r\n0\r\nTrailer: z\r\n\r\n"
        #expect(feed(chunked, step: step) == .complete(HTTPResponse(status: 201, headers: ["transfer-encoding": "chunked"], body: Array("[1,2]".utf8)), keep: true))
        let close = "HTTP/1.0 503 Service Unavailable\r\nRetry-After: 2\r\n\r\nbusy"
        #expect(feed(close, step: step) == .complete(HTTPResponse(status: 503, headers: ["retry-after": "2"], body: Array("busy".utf8)), keep: false))
        let closing = "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
        #expect(feed(closing, step: step) == .complete(HTTPResponse(status: 200, headers: ["connection": "close", "content-length": "0"]), keep: false))
    }

    /// Header names in lower case, values without the blanks around them, whether the head is plain
    /// ASCII (read byte by byte) or holds other bytes (read as text), with the same result for the same
    /// header; a status line that is not HTTP/1.x or has no three-digit code is refused either way.
    @Test(arguments: [1, 5, 4096])
    func headersOfASCIIAndOtherHeads(step: Int) {
        let ascii = "HTTP/1.1 200 OK\r\nX-Mixed-CASE:  \t spaced value\t \r\nEmpty:\r\nno colon line\r\nRetry-After:3\r\nContent-Length: 2\r\n\r\n[]"
        #expect(feed(ascii, step: step) == .complete(HTTPResponse(status: 200, headers: [
            "x-mixed-case": "spaced value", "empty": "", "retry-after": "3", "content-length": "2",
        ], body: Array("[]".utf8)), keep: true))
        let other = "HTTP/1.1 200 Ok\u{e9}\r\nX-Mixed-CASE:  \t spaced value\t \r\nX-Name: Z\u{fc}rich \r\nContent-Length: 2\r\n\r\n[]"
        #expect(feed(other, step: step) == .complete(HTTPResponse(status: 200, headers: [
            "x-mixed-case": "spaced value", "x-name": "Z\u{fc}rich", "content-length": "2",
        ], body: Array("[]".utf8)), keep: true))
        for head in ["HTTP/2 200 OK", "HTTP/1.1 20 OK", "HTTP/1.1 OK", "http/1.1 200 OK", "HTTP/1.1 200\u{e9} OK"] {
            #expect(feed(head + "\r\nContent-Length: 0\r\n\r\n", step: step) == .failed(.other("not an HTTP answer")), "\(head)")
        }
    }

    @Test func longAnswersAndBrokenOnesAreErrors() {
        #expect(feed("HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n", step: 100, limit: 10) == .failed(.tooLarge(limit: 10, status: 200)))
        #expect(feed("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\n123456\r\n6\r\n123456\r\n0\r\n\r\n", step: 3, limit: 10)
                == .failed(.tooLarge(limit: 10, status: 200)))
        #expect(feed("HTTP/1.0 200 OK\r\n\r\n" + String(repeating: "x", count: 11), step: 4, limit: 10) == .failed(.tooLarge(limit: 10, status: 200)))
        #expect(feed("HTTP/1.1 200 OK\r\n" + String(repeating: "X-A: b\r\n", count: 10_000), step: 4096) == .failed(.headersTooLong))
        #expect(feed("SSH-2.0-OpenSSH\r\n\r\n", step: 100) == .failed(.other("not an HTTP answer")))
        #expect(feed("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", step: 100) == .failed(.other("malformed chunked answer")))
        // Cut short: no complete answer, so the caller reports the connection lost.
        #expect(feed("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n12345", step: 100) == .more)
    }
}
