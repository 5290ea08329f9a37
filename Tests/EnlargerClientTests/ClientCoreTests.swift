import EnlargerProtocol
import ImageModel
import XCTest

@testable import Enlarger

private typealias H = ClientCoreHarness

/// The client's protocol decisions, without sockets, threads or a real clock.
final class ClientCoreTests: XCTestCase {
    // MARK: Events

    func testAProgressiveRequestGetsDegradedThenFinalAndEnds() {
        var harness = H()
        let token = harness.submit("a")
        XCTAssertEqual(harness.sentSummary, ["submit a"])
        harness.broker([H.accepted("a"), H.started("a"), H.degraded("a"), H.final("a")])
        XCTAssertEqual(harness.summary, ["#1 accepted", "#1 started 1", "#1 degraded", "#1 final"])
        XCTAssertEqual(harness.actions[2], .deliver(
            token, .degraded(EncodedImage(bytes: [7], width: 10, height: 8, format: .jpeg)), terminal: false))
        XCTAssertTrue(harness.core.isIdle)
        XCTAssertNil(harness.core.nextWakeup, "nothing to wake up for once idle")
        // Late frames about an ended request reach nobody.
        harness.clear()
        harness.broker([H.degraded("a"), H.final("a")])
        XCTAssertEqual(harness.summary, [])
    }

    func testAResultThisVersionCannotReadEndsTheRequest() {
        var harness = H()
        harness.submit("a")
        var result = Enlarger_V1_Result()
        result.requestID = "a"
        result.stage = .unspecified
        result.terminal = false
        harness.broker([H.accepted("a"), .result(result, image: [1])])
        XCTAssertEqual(harness.summary, ["#1 accepted", "#1 fails failed malformed"])
        XCTAssertTrue(harness.core.isIdle)
    }

    func testFailedCancelledAndRejectedEndTheOldestRequestWithTheId() {
        var harness = H()
        harness.submit("a")
        harness.submit("b")
        harness.submit("c")
        harness.broker([H.accepted("a"), H.failed("a", .corrupt, "bad Huffman code"), H.accepted("b"), H.cancelled("b")])
        var rejected = Enlarger_V1_Rejected()
        rejected.requestID = "c"
        rejected.code = .overloaded
        harness.broker(.rejected(rejected))
        XCTAssertEqual(harness.summary, ["#1 accepted", "#1 fails failed corrupt", "#2 accepted", "#2 fails cancelled",
                                         "#3 fails rejected overloaded"])
        XCTAssertEqual(harness.actions[1], .fail(RequestToken(value: 1), .failed(.corrupt, "bad Huffman code")))
    }

    func testDuplicateIDFromTheBrokerEndsTheRequestThatWasRefused() {
        var harness = H()
        harness.submit("taken")
        harness.broker(H.failed("taken", .duplicateID, "a request with this id is already live"))
        XCTAssertEqual(harness.actions, [.fail(RequestToken(value: 1), .duplicateID("a request with this id is already live"))])
    }

    func testStatusCallsAreAnsweredInOrder() {
        var harness = H()
        harness.status()
        harness.status()
        XCTAssertEqual(harness.sentSummary, ["status", "status"])
        harness.broker([.statusReply(.init()), .statusReply(.init()), .statusReply(.init())])
        XCTAssertEqual(harness.summary, ["#1 status", "#2 status"], "an answer nobody waits for is dropped")
    }

    func testFramesAboutAnIDBeforeItsRequestWasAcceptedAreAnotherRequestsAndDropped() {
        var harness = H()
        harness.submit("a")
        // Another request with the id (another process's, moved here by a Sync) talks first.
        harness.broker([H.started("a"), H.degraded("a"), H.final("a"), H.cancelled("a")])
        XCTAssertEqual(harness.summary, [])
        harness.broker([H.accepted("a"), H.final("a")])
        XCTAssertEqual(harness.summary, ["#1 accepted", "#1 final"])
    }

    // MARK: Cancel

    func testCancelBeforeAcceptedFollowsTheSubmitAndTheRequestEndsWithTheBrokersCancelled() {
        var harness = H()
        harness.submit("a")
        harness.cancel("a")
        XCTAssertEqual(harness.sentSummary, ["submit a", "cancel a"])
        // The consumer sees none of this: its channel was marked when `cancel` was called.
        // The core still gives the request exactly one end, when the broker's comes.
        harness.broker([H.accepted("a"), H.cancelled("a"), H.cancelAck("a", .cancelled)])
        XCTAssertEqual(harness.summary, ["#1 accepted", "#1 fails cancelled", "#2 cancel: cancelled"])
        XCTAssertTrue(harness.core.isIdle)
    }

    func testAnIDUsedAgainAfterACancelGoesOutOnceTheBrokerEndedTheCancelledRequest() {
        var harness = H()
        harness.submit("a")
        harness.broker([H.accepted("a"), H.started("a")])
        harness.clear()
        harness.cancel("a", waits: false)
        harness.submit("a")  // taken at once; sent once the broker's end of the first is heard
        XCTAssertEqual(harness.sentSummary, ["cancel a"])
        harness.broker([H.degraded("a"), H.cancelled("a")])
        XCTAssertEqual(harness.sentSummary, ["cancel a", "submit a"])
        harness.broker([H.cancelAck("a", .cancelled), H.accepted("a"), H.final("a")])
        XCTAssertEqual(harness.summary, ["#1 degraded", "#1 fails cancelled", "#2 accepted", "#2 final"])
    }

    func testTheAnswerToTheCancelEndsACancelledRequestTheBrokerNeverHad() {
        var harness = H()
        harness.submit("a")
        harness.cancel("a", waits: false)
        harness.submit("a")
        XCTAssertEqual(harness.sentSummary, ["submit a", "cancel a"])
        // The first Submit was lost: the broker answers the Cancel only.
        harness.broker(H.cancelAck("a", .unknown))
        XCTAssertEqual(harness.summary, ["#1 fails cancelled"])
        XCTAssertEqual(harness.sentSummary, ["submit a", "cancel a", "submit a"])
    }

    func testCancellingAnIDEndsTheRequestsWaitingBehindItAtOnce() {
        var harness = H()
        harness.submit("a")
        harness.cancel("a", waits: false)
        harness.submit("a")
        harness.cancel("a", waits: false)
        XCTAssertEqual(harness.summary, ["#2 fails cancelled"], "never sent, nothing to wait for")
        XCTAssertEqual(harness.sentSummary, ["submit a", "cancel a", "cancel a"])
    }

    // MARK: Liveness

    func testPingsFollowTheClientsIntervalThenTheBrokersShorterOne() {
        var harness = H(heartbeat: .seconds(1), sync: .seconds(10))
        harness.submit("a")
        harness.clear()
        XCTAssertEqual(harness.core.nextWakeup, harness.now + .seconds(1))
        harness.advance(by: .milliseconds(999))
        XCTAssertEqual(harness.sentSummary, [])
        harness.advance(by: .milliseconds(1))
        XCTAssertEqual(harness.sentSummary, ["ping"])

        harness.broker(H.accepted("a", intervalMs: 200))
        harness.clear()
        XCTAssertEqual(harness.core.nextWakeup, harness.now + .milliseconds(200))
        harness.advance(by: .seconds(1), step: .milliseconds(50))
        XCTAssertEqual(harness.sentSummary, Array(repeating: "ping", count: 5))
        XCTAssertEqual(harness.summary, [], "alive while the broker answers")
    }

    func testNoPingWhileMessagesWaitForTheSocket() {
        var harness = H(heartbeat: .seconds(1))
        harness.connected = false
        harness.submit("a")
        harness.advance(by: .milliseconds(1500))
        XCTAssertEqual(harness.sentSummary, [])
        harness.connected = true
        harness.flush()
        XCTAssertEqual(harness.sentSummary, ["submit a"], "no Ping queued behind the Submit")
    }

    func testBrokerSilenceFailsEverythingOutstandingAndStartsOver() throws {
        var harness = H(heartbeat: .milliseconds(100), missedHeartbeats: 3)
        harness.submit("a")
        harness.submit("b")
        harness.cancel("c")
        harness.status()
        harness.broker(H.accepted("a"))
        harness.clear()
        harness.advance(by: .milliseconds(299))
        XCTAssertEqual(harness.summary, [])
        XCTAssertEqual(harness.core.nextWakeup, harness.now + .milliseconds(1))
        harness.advance(by: .milliseconds(1))
        XCTAssertEqual(harness.summary, ["#1 fails brokerLost", "#2 fails brokerLost", "#3 cancel fails brokerLost",
                                         "#4 status fails brokerLost", "reconnect"])
        XCTAssertEqual(harness.core.routes.keys.sorted(), ["a", "b"], "kept until a Sync tells their fate")

        // The new connection has heard nothing yet.
        harness.clear()
        harness.submit("d")
        harness.advance(by: .milliseconds(300))
        XCTAssertEqual(harness.summary, ["#5 fails brokerUnreachable", "reconnect"])
        XCTAssertEqual(harness.core.routes.keys.sorted(), ["a", "b", "d"])

        // A broker that answers at last settles them.
        harness.advance(by: .seconds(2), step: .milliseconds(50))
        XCTAssertEqual(harness.sentRequests.last, "sync a,b,d")
        harness.broker(H.syncReply(nonce: try XCTUnwrap(harness.lastSyncNonce), unknown: ["a", "b", "d"]))
        XCTAssertEqual(harness.summary, ["#5 fails brokerUnreachable", "reconnect"])
        XCTAssertTrue(harness.core.isIdle)
        XCTAssertNil(harness.core.nextWakeup)
    }

    /// A broker that only paused still holds the requests sent to it, and moves them to the
    /// new connection when a Sync names their ids: a later request with such an id must not
    /// get their frames.
    func testARequestGivenUpForSilenceKeepsItsIDUntilASyncSettlesIt() throws {
        var harness = H(heartbeat: .milliseconds(100), sync: .milliseconds(250))
        harness.submit("a")
        harness.broker(H.accepted("a"))
        harness.advance(by: .milliseconds(300))
        XCTAssertEqual(harness.summary, ["#1 accepted", "#1 fails brokerLost", "reconnect"])
        harness.submit("a")
        harness.clear()
        harness.advance(by: .milliseconds(250), step: .milliseconds(50))
        XCTAssertEqual(harness.sentRequests, ["sync a"], "the new request waits")
        // The broker moved the old request here: its frames go nowhere.
        harness.broker([H.syncReply(nonce: try XCTUnwrap(harness.lastSyncNonce), unknown: []), H.final("a")])
        XCTAssertEqual(harness.summary, [])
        XCTAssertEqual(harness.sentRequests, ["sync a", "submit a"])
        harness.broker([H.accepted("a"), H.final("a")])
        XCTAssertEqual(harness.summary, ["#2 accepted", "#2 final"])
    }

    func testABrokerNeverHeardIsUnreachable() {
        var harness = H(heartbeat: .milliseconds(100))
        harness.connected = false
        harness.submit("a")
        XCTAssertEqual(harness.core.nextWakeup, harness.now + .milliseconds(300))
        harness.advance(by: .milliseconds(300))
        XCTAssertEqual(harness.summary, ["#1 fails brokerUnreachable", "reconnect"])
        XCTAssertEqual(harness.sent.count, 0)
    }

    // MARK: Sync

    func testSyncFailsTheRequestsSentBeforeItThatTheBrokerNoLongerHolds() throws {
        var harness = H(heartbeat: .seconds(1), sync: .seconds(2))
        harness.submit("a")
        harness.submit("b")
        harness.broker([H.accepted("a"), H.accepted("b")])
        harness.clear()
        harness.advance(by: .seconds(2), step: .milliseconds(100))
        XCTAssertEqual(harness.sentRequests, ["sync a,b"])
        let nonce = try XCTUnwrap(harness.lastSyncNonce)
        harness.submit("c")  // sent after the Sync: the reply says nothing about it
        harness.clear()
        harness.broker(H.syncReply(nonce: nonce, unknown: ["a", "c"]))
        XCTAssertEqual(harness.summary, ["#1 fails failed requestLost"])
        XCTAssertEqual(harness.core.routes.keys.sorted(), ["b", "c"])
        // A reply to a Sync that was not sent, or answered already, changes nothing.
        harness.broker(H.syncReply(nonce: nonce, unknown: ["b"]))
        XCTAssertEqual(harness.summary, ["#1 fails failed requestLost"])
    }

    func testNoSyncWhileNothingSentWaitsForAnAnswer() {
        var harness = H(sync: .milliseconds(500))
        harness.connected = false
        harness.submit("a")
        harness.advance(by: .seconds(2))
        XCTAssertEqual(harness.sentSummary, [])
    }

    func testACallWhoseAnswerWasLostIsAskedAgainAfterASync() throws {
        var harness = H(heartbeat: .seconds(1), sync: .seconds(2))
        harness.cancel("x")
        harness.status()
        XCTAssertEqual(harness.sentSummary, ["cancel x", "status"])
        harness.advance(by: .seconds(2), step: .milliseconds(500))
        XCTAssertEqual(harness.sentRequests, ["cancel x", "status", "sync"], "an empty Sync: only calls wait")
        // The reply comes with no answer before it: a reset connection lost them.
        let nonce = try XCTUnwrap(harness.lastSyncNonce)
        harness.clear()
        harness.broker(H.syncReply(nonce: nonce, unknown: []))
        XCTAssertEqual(harness.sentSummary, ["cancel x", "status"])
        harness.broker([H.cancelAck("x", .unknown), .statusReply(.init()), H.cancelAck("x", .unknown)])
        XCTAssertEqual(harness.summary, ["#1 cancel: unknown", "#2 status"], "answered once each")
        XCTAssertTrue(harness.core.isIdle)
    }

    func testALostCancelIsNotSentAgainWhenALaterRequestWithTheIDIsOnTheWire() throws {
        var harness = H(heartbeat: .seconds(1), sync: .seconds(2))
        harness.submit("a")
        harness.broker(H.accepted("a"))
        harness.cancel("a")
        harness.broker(H.cancelled("a"))  // its CancelAck is lost
        harness.submit("a")
        harness.broker(H.accepted("a"))
        harness.clear()
        harness.advance(by: .seconds(2), step: .milliseconds(500))
        let nonce = try XCTUnwrap(harness.lastSyncNonce)
        harness.clear()
        harness.broker(H.syncReply(nonce: nonce, unknown: []))
        XCTAssertEqual(harness.sentSummary, [], "a second Cancel would hit the new request")
        XCTAssertEqual(harness.summary, ["#2 cancel fails failed requestLost"])
    }

    // MARK: Timeouts and limits

    func testATimeoutFailsTheRequestLocallyAndItsLateFramesReachNobody() {
        var harness = H(heartbeat: .seconds(1))
        harness.submit("a", timeoutMs: 500)
        harness.broker(H.accepted("a"))
        harness.clear()
        harness.advance(by: .milliseconds(1400), step: .milliseconds(100))
        harness.advance(by: .milliseconds(99))
        XCTAssertEqual(harness.summary, [])
        harness.advance(by: .milliseconds(1))
        XCTAssertEqual(harness.summary, ["#1 fails failed deadlineExceeded"], "one heartbeat interval after the timeout")
        XCTAssertEqual(harness.sentRequests, ["cancel a"])

        harness.submit("a")
        harness.clear()
        harness.broker([H.degraded("a"), H.cancelled("a")])
        XCTAssertEqual(harness.sentSummary, ["submit a"], "sent once the broker ended the first")
        harness.broker([H.cancelAck("a", .cancelled), H.accepted("a")])
        XCTAssertEqual(harness.summary, ["#2 accepted"], "the old request's frames went nowhere")
    }

    func testATimedOutRequestIsForgottenWithTheAnswerToItsCancel() {
        var harness = H(heartbeat: .seconds(1))
        harness.submit("a", timeoutMs: 100)
        harness.advance(by: .milliseconds(1100))
        XCTAssertEqual(harness.summary, ["#1 fails failed deadlineExceeded"])
        harness.broker(H.cancelAck("a", .unknown))  // the broker never had it (or its end was lost)
        XCTAssertTrue(harness.core.isIdle)
    }

    func testOversizeInputIsRefusedBeforeSendingAgainstTheBrokersLimit() {
        var harness = H(maxInputBytes: 100)
        harness.submit("big", image: Array(repeating: 0, count: 101))
        XCTAssertEqual(harness.summary, ["#1 fails rejected tooLarge"])
        XCTAssertEqual(harness.sent.count, 0)
        XCTAssertTrue(harness.core.isIdle)
        harness.submit("fits", image: Array(repeating: 0, count: 100))
        XCTAssertEqual(harness.sentSummary, ["submit fits"])
        harness.broker(.pong(H.pong(maxInputBytes: 10)))
        harness.submit("now too big", image: Array(repeating: 0, count: 11))
        XCTAssertEqual(harness.summary, ["#1 fails rejected tooLarge", "#3 fails rejected tooLarge"])
    }

    // MARK: Broker restarts

    func testARestartedBrokerGetsTheRequestsItDoesNotHoldAgainInOrder() throws {
        var harness = H()
        harness.submit("a")
        harness.submit("b")
        harness.broker([H.accepted("a", instance: 1), H.accepted("b", instance: 1), H.degraded("a")])
        harness.status()
        harness.clear()
        harness.broker(.pong(H.pong(instance: 2)))
        harness.advance(by: .zero)
        XCTAssertEqual(harness.sentSummary, ["sync a,b"], "the new instance is asked at once")
        harness.broker(H.syncReply(nonce: try XCTUnwrap(harness.lastSyncNonce), unknown: ["a", "b"], instance: 2))
        XCTAssertEqual(harness.summary, [])
        XCTAssertEqual(harness.sentSummary, ["sync a,b", "status", "submit a final", "submit b"],
                       "the status call's answer was lost with the old broker; a's degraded was delivered")
        harness.broker([.statusReply(.init()), H.accepted("a", instance: 2), H.accepted("b", instance: 2),
                        H.degraded("b"), H.final("a"), H.final("b")])
        XCTAssertEqual(harness.summary, ["#3 status", "#2 degraded", "#1 final", "#2 final"], "no second Accepted")
        XCTAssertTrue(harness.core.isIdle)
    }

    func testRequestsTheNewBrokerGotBeforeTheClientNoticedAreNotSentAgain() throws {
        var harness = H()
        harness.submit("a")
        harness.broker(H.accepted("a", instance: 1))
        harness.submit("b")  // reaches the new broker before the client knows it restarted
        harness.submit("c")
        harness.clear()
        harness.broker(H.accepted("b", instance: 2))
        harness.advance(by: .zero)
        XCTAssertEqual(harness.sentSummary, ["sync a,b,c"])
        harness.broker(H.syncReply(nonce: try XCTUnwrap(harness.lastSyncNonce), unknown: ["a"], instance: 2))
        XCTAssertEqual(harness.sentSummary, ["sync a,b,c", "submit a"], "only a went to the old broker")
        harness.broker([H.accepted("c", instance: 2), H.accepted("a", instance: 2), H.final("b"), H.final("c"), H.final("a")])
        XCTAssertEqual(harness.summary, ["#2 accepted", "#3 accepted", "#2 final", "#3 final", "#1 final"])
        XCTAssertTrue(harness.core.isIdle)
    }

    func testACancelledRequestIsNotSubmittedAgainToARestartedBroker() throws {
        var harness = H()
        harness.submit("a")
        harness.broker(H.accepted("a", instance: 1))
        harness.cancel("a")
        harness.submit("a")  // waits for the first to end
        harness.clear()
        harness.broker(.pong(H.pong(instance: 2)))
        harness.advance(by: .zero)
        harness.broker(H.syncReply(nonce: try XCTUnwrap(harness.lastSyncNonce), unknown: ["a"], instance: 2))
        XCTAssertEqual(harness.summary, ["#1 fails failed requestLost"], "its channel is cancelled: nobody sees this")
        XCTAssertEqual(harness.sentSummary, ["sync a", "cancel a", "submit a"],
                       "the Cancel's answer was lost with the old broker; the next request goes out")
        harness.broker([H.cancelAck("a", .unknown), H.accepted("a", instance: 2), H.final("a")])
        XCTAssertEqual(harness.summary, ["#1 fails failed requestLost", "#2 cancel: unknown", "#3 accepted", "#3 final"])
        XCTAssertTrue(harness.core.isIdle)
    }

    func testARestartedBrokerFailsEverythingWhenResubmissionIsOff() throws {
        var harness = H(resubmit: false)
        harness.submit("a")
        harness.broker(H.accepted("a", instance: 1))
        harness.clear()
        harness.broker(.pong(H.pong(instance: 2)))
        XCTAssertEqual(harness.summary, ["#1 fails brokerLost", "reconnect"])
        // Kept until a Sync shows that the new broker does not hold it.
        harness.advance(by: .seconds(2), step: .milliseconds(500), pong: H.pong(instance: 2))
        harness.broker(H.syncReply(nonce: try XCTUnwrap(harness.lastSyncNonce), unknown: ["a"], instance: 2))
        XCTAssertEqual(harness.summary, ["#1 fails brokerLost", "reconnect"])
        XCTAssertTrue(harness.core.isIdle)
    }

    // MARK: Wakeups and closing

    func testNothingIsDueBeforeNextWakeup() {
        var harness = H(heartbeat: .seconds(1), sync: .milliseconds(700))
        XCTAssertNil(harness.core.nextWakeup)
        harness.submit("a", timeoutMs: 100)
        harness.submit("b")
        harness.broker([H.accepted("a"), H.accepted("b")])
        var seen = 0
        while let wakeup = harness.core.nextWakeup, seen < 20 {
            var early = harness.core
            XCTAssertEqual(early.tick(now: wakeup - .nanoseconds(1)), [])
            XCTAssertNil(early.nextMessage, "nothing queued before \(wakeup)")
            harness.advance(by: wakeup - harness.now)
            if harness.sentSummary.last == "ping" { harness.broker(.pong(H.pong())) }
            seen += 1
        }
        XCTAssert(harness.summary.contains("#1 fails failed deadlineExceeded"))
        XCTAssert(harness.sentRequests.contains("sync a,b"))
    }

    func testCloseFailsEverythingAndEveryLaterCommand() {
        var harness = H()
        harness.submit("a")
        harness.cancel("b")
        harness.status()
        harness.close()
        XCTAssertEqual(harness.summary, ["#1 fails closed", "#2 cancel fails closed", "#3 status fails closed"])
        harness.clear()
        harness.submit("c")
        harness.cancel("c")
        harness.status()
        XCTAssertEqual(harness.summary, ["#4 fails closed", "#5 cancel fails closed", "#6 status fails closed"])
        XCTAssertNil(harness.core.nextWakeup)
        XCTAssertEqual(harness.sent.count, 0)
    }
}
