@testable import Fetching
import XCTest

final class SourceURLTests: XCTestCase {
    func testNormalisation() throws {
        let url = try SourceURL(parsing: "HTTP://Images.EXAMPLE.com./a/b.jpg?size=2#top")
        XCTAssertEqual(url.scheme, "http")
        XCTAssertEqual(url.host, .name("images.example.com"))
        XCTAssertEqual(url.port, 80)
        XCTAssertEqual(url.pathAndQuery, "/a/b.jpg?size=2")
        XCTAssertEqual(url.description, "http://images.example.com/a/b.jpg?size=2")

        XCTAssertEqual(try SourceURL(parsing: "https://example.com").description, "https://example.com/")
        XCTAssertEqual(try SourceURL(parsing: "https://example.com?x").pathAndQuery, "/?x")
        XCTAssertEqual(try SourceURL(parsing: "https://example.com:443/").description, "https://example.com/")
        XCTAssertEqual(try SourceURL(parsing: "http://example.com:080/").port, 80)
        XCTAssertEqual(try SourceURL(parsing: "https://example.com:8443/").description, "https://example.com:8443/")
        XCTAssertEqual(try SourceURL(parsing: "http://[::FFFF:7f00:1]:81/").description, "http://[::ffff:127.0.0.1]:81/")
        XCTAssertEqual(try SourceURL(parsing: "http://0x7f.1/").description, "http://127.0.0.1/")
    }

    func testPathCharactersAreEncoded() throws {
        XCTAssertEqual(try SourceURL(parsing: "http://a.example/{x}|y^\"<>`[]").pathAndQuery, "/%7Bx%7D%7Cy%5E%22%3C%3E%60%5B%5D")
        XCTAssertEqual(try SourceURL(parsing: "http://a.example/100%/%41%zz").pathAndQuery, "/100%25/%41%25zz")
        XCTAssertEqual(try SourceURL(parsing: "http://a.example/a@b:c;d=e?f=g&h=/i").pathAndQuery, "/a@b:c;d=e?f=g&h=/i")
    }

    func testLooseIPv4Hosts() throws {
        let cases: [(String, String)] = [
            ("2130706433", "127.0.0.1"), ("0x7f000001", "127.0.0.1"), ("0177.0.0.1", "127.0.0.1"),
            ("127.1", "127.0.0.1"), ("127.0.1", "127.0.0.1"), ("127.0.0.1.", "127.0.0.1"), ("0", "0.0.0.0"),
            ("0x7f.0x00.0x00.0x01", "127.0.0.1"), ("017700000001", "127.0.0.1"), ("0x", "0.0.0.0"),
            ("10.0x10.010", "10.16.0.8"), ("4294967295", "255.255.255.255"), ("0XA.0.0.1", "10.0.0.1"),
        ]
        for (host, address) in cases {
            XCTAssertEqual(try SourceURL(parsing: "http://\(host)/").host, .address(IPAddress(address)!), host)
        }
        for host in ["4294967296", "256.0.0.1", "1.2.3.4.5", "1.256.0.0.0", "09.1.1.1", "foo.0x10", "example.123", "1.2.3.4.."] {
            XCTAssertThrowsError(try SourceURL(parsing: "http://\(host)/"), host) { error in
                guard case .badURL = error as? FetchError else { return XCTFail("\(host): \(error)") }
            }
        }
        // A number elsewhere than the last label is a name, and so is a last label that is no
        // number in any base (as in a browser).
        XCTAssertEqual(try SourceURL(parsing: "http://1.example/").host, .name("1.example"))
        XCTAssertEqual(try SourceURL(parsing: "http://0x1g/").host, .name("0x1g"))
    }

    func testRefusedForms() {
        let refused = [
            "", "example.com", "http:example.com", "http:/example.com", "http:///example.com", "//example.com/",
            "http://", "http://:80/", "http://example.com:/", "http://[::1/", "http://[::1]x/", "http://[]/",
            "http://a:b:c/", "http://exa_mple.com:99999/", "http://a..b/", "http://-/\u{7f}", "http://example.com/\t",
            "http://example.com/\u{00e9}", "http://" + String(repeating: "a", count: 64) + ".example/",
            "https://example.com:-1/", "http://example.com:+80/", "http://[1::2::3]/", "http://[::1%eth0]/",
        ]
        for text in refused {
            XCTAssertThrowsError(try SourceURL(parsing: text), text) { error in
                guard case .badURL = error as? FetchError else { return XCTFail("\(text): \(error)") }
            }
        }
    }

    func testRefusalMessagesNameTheProblem() {
        func message(_ text: String) -> String {
            do {
                _ = try SourceURL(parsing: text)
                return "parsed"
            } catch {
                return error.message
            }
        }
        XCTAssertEqual(message("http://user@example.com/"), "bad URL: userinfo (user@host) is not accepted")
        XCTAssertEqual(message("ftp://example.com/"), "bad URL: scheme ftp is not http or https")
        XCTAssertEqual(message("http://example.com:65536/"), "bad URL: port 65536 is outside 1...65535")
        XCTAssertEqual(message("http://[fe80::1%25eth0]/"), "bad URL: IPv6 zone identifiers are not accepted")
        XCTAssertTrue(message("http://пример.рф/").contains("non-ASCII"))
        XCTAssertTrue(message("http://ex%61mple.com/").contains("percent-encoded"))
    }

    func testResolvingLocations() throws {
        let base = try SourceURL(parsing: "https://img.example/a/b/c.jpg?q=1")
        let cases: [(String, String)] = [
            ("https://other.example/x", "https://other.example/x"),
            ("HTTPS://OTHER.example:8443", "https://other.example:8443/"),
            ("//cdn.example/y.jpg", "https://cdn.example/y.jpg"),
            ("/root.jpg", "https://img.example/root.jpg"),
            ("/p/../q/./r.jpg?s=1#frag", "https://img.example/q/r.jpg?s=1"),
            ("d.jpg", "https://img.example/a/b/d.jpg"),
            ("../d.jpg", "https://img.example/a/d.jpg"),
            ("../../../../d.jpg", "https://img.example/d.jpg"),
            ("./", "https://img.example/a/b/"),
            ("..", "https://img.example/a/"),
            ("?other=2", "https://img.example/a/b/c.jpg?other=2"),
            ("#x", "https://img.example/a/b/c.jpg?q=1"),
        ]
        for (location, expected) in cases {
            XCTAssertEqual(try base.resolving(location).description, expected, location)
        }
        for location in ["", "ftp://x/", "http://user@x/", "//u:p@x/", "/a\\b", "e f", "javascript:alert(1)", "//[::1%25lo]/"] {
            XCTAssertThrowsError(try base.resolving(location), location)
        }
    }

    func testRedirectRules() throws {
        var policy = URLSourcePolicy()
        policy.maxRedirects = 2
        let fetcher = URLFetcher(policy: policy)
        defer { fetcher.shutdown() }
        let secure = try SourceURL(parsing: "https://img.example/a.jpg")
        let plain = try SourceURL(parsing: "http://img.example/a.jpg")

        XCTAssertEqual(try fetcher.redirectTarget(from: secure, status: 301, location: "/b.jpg", redirectsSoFar: 0).description,
                       "https://img.example/b.jpg")
        XCTAssertEqual(try fetcher.redirectTarget(from: plain, status: 302, location: "https://img.example/", redirectsSoFar: 1).scheme,
                       "https")
        XCTAssertThrowsError(try fetcher.redirectTarget(from: secure, status: 302, location: "http://img.example/", redirectsSoFar: 0)) {
            guard case .refused(let reason) = $0 as? FetchError else { return XCTFail("\($0)") }
            XCTAssertTrue(reason.contains("https to http"), reason)
        }
        XCTAssertThrowsError(try fetcher.redirectTarget(from: plain, status: 307, location: "/c.jpg", redirectsSoFar: 2)) {
            guard case .refused(let reason) = $0 as? FetchError else { return XCTFail("\($0)") }
            XCTAssertTrue(reason.contains("more than 2 redirects"), reason)
        }
        XCTAssertThrowsError(try fetcher.redirectTarget(from: plain, status: 302, location: "http://u@img.example/", redirectsSoFar: 0)) {
            guard case .badURL = $0 as? FetchError else { return XCTFail("\($0)") }
        }
    }
}
