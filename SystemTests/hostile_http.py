"""A hostile HTTP server on 127.0.0.1 for the upload tests (standard library only). Prints one JSON line with
its port, then serves until killed.

Modes:
  token     GET /api/v2/authorization/request/<token> answers 200 with --exchange (a JSON text, sent as given);
            POST /api/v3/<collection> stores nothing and answers 201 with the document's identifier; GET
            /api/v3/status grants every permission. --tls CERT KEY serves https.
  continue  After reading a request's head, sends "HTTP/1.1 100 Continue" answers without pause until the
            client goes away.
"""
import argparse
import json
import socket
import ssl
import sys
import threading

CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n" * 64


def read_request(conn):
    """The request's head and body, or None when the client went away."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        body += chunk
    method, path = lines[0].split(" ")[:2]
    return method, path, body[:length]


def answer(conn, status, body):
    data = json.dumps(body).encode() if not isinstance(body, bytes) else body
    conn.sendall(b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (status, len(data)) + data)


def serve_token(conn, exchange):
    while True:
        request = read_request(conn)
        if request is None:
            return
        method, path, body = request
        if path.startswith("/api/v2/authorization/request/"):
            answer(conn, 200, exchange.encode())
        elif method == "POST" and path.startswith("/api/v3/"):
            try:
                identifier = json.loads(body).get("identifier")
            except ValueError:
                identifier = None
            answer(conn, 201, {"status": 201, "identifier": identifier, "lastModified": 1})
        elif path == "/api/v3/status":
            answer(conn, 200, {"status": 200, "result": {"apiPermissions": {"entries": "crud", "treatments": "crud"}}})
        else:
            answer(conn, 404, {"status": 404})


def serve_continue(conn):
    if read_request(conn) is None:
        return
    while True:
        conn.sendall(CONTINUE)


def handle(conn, args, context):
    try:
        if context is not None:
            conn = context.wrap_socket(conn, server_side=True)
        if args.mode == "token":
            serve_token(conn, args.exchange)
        else:
            serve_continue(conn)
    except (OSError, ssl.SSLError, ValueError):
        pass
    finally:
        conn.close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=["token", "continue"], required=True)
    parser.add_argument("--exchange", default='{"token":"a.b.c","iat":0,"exp":28800}')
    parser.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
    args = parser.parse_args()
    context = None
    if args.tls:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.tls[0], args.tls[1])
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    print(json.dumps({"port": listener.getsockname()[1]}), flush=True)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=handle, args=(conn, args, context), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
