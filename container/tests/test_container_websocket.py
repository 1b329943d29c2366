"""The bidirectional WebSocket stream in-process with a fake engine."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from container_fakes import AppFactory, FakeEngine
from starlette.testclient import TestClient, WebSocketTestSession
from tts_container.state import AppState

WS_PATH = "/invocations-bidirectional-stream"


def read_request(ws: WebSocketTestSession) -> tuple[list[dict[str, Any]], int, int]:
    """Frames of one request until complete or error: (json frames, audio bytes, binary frames)."""
    frames: list[dict[str, Any]] = []
    audio = 0
    binary = 0
    while True:
        message = ws.receive()
        if message.get("bytes") is not None:
            audio += len(message["bytes"])
            binary += 1
            continue
        frame = json.loads(message["text"])
        frames.append(frame)
        if frame["type"] in ("synthesis_complete", "error"):
            return frames, audio, binary


def test_one_session_carries_several_requests_and_survives_errors(make_app: AppFactory) -> None:
    app, _, metrics_out = make_app(FakeEngine(segments=3, samples=1200))
    with TestClient(app) as client:
        assert app.state.tts.ready_event.wait(10)
        with client.websocket_connect(WS_PATH) as ws:
            ws.send_text(json.dumps({"text": "First request.", "request_id": "a"}))
            frames, audio, binary = read_request(ws)
            assert frames[0] == {"type": "synthesis_start", "request_id": "a"}
            assert frames[-1] == {
                "type": "synthesis_complete",
                "request_id": "a",
                "audio_bytes": 7200,
                "audio_s": 0.15,
            }
            assert (audio, binary) == (7200, 3)

            ws.send_text("{broken")
            frames, audio, _ = read_request(ws)
            assert frames == [
                {
                    "type": "error",
                    "request_id": None,
                    "error": "invalid_json",
                    "detail": frames[0]["detail"],
                }
            ]
            assert audio == 0

            ws.send_text(json.dumps({"text": "Hi.", "voice": "nobody", "request_id": "b"}))
            frames, _, _ = read_request(ws)
            assert frames[0]["error"] == "unknown_voice"
            assert frames[0]["request_id"] == "b"

            ws.send_text(json.dumps({"text": "Hi.", "format": "wav", "request_id": "w"}))
            frames, _, _ = read_request(ws)
            assert frames[0]["error"] == "invalid_format"

            ws.send_bytes(json.dumps({"text": "Binary frame.", "request_id": "c"}).encode())
            frames, audio, _ = read_request(ws)
            assert [f["type"] for f in frames] == ["synthesis_start", "synthesis_complete"]
            assert frames[-1]["request_id"] == "c"
            assert audio == 7200
        assert app.state.tts.in_flight.depth == 0
    statuses = [json.loads(line)["status"] for line in metrics_out.getvalue().splitlines()]
    assert statuses == ["ok", "invalid", "invalid", "invalid", "ok"]
    transports = {json.loads(line)["transport"] for line in metrics_out.getvalue().splitlines()}
    assert transports == {"websocket"}


def test_engine_error_is_an_error_frame_and_the_session_goes_on(make_app: AppFactory) -> None:
    engine = FakeEngine(segments=2, fail_at=1)
    app, _, _ = make_app(engine)
    with TestClient(app) as client:
        assert app.state.tts.ready_event.wait(10)
        with client.websocket_connect(WS_PATH) as ws:
            for request_id in ("x1", "x2"):
                ws.send_text(json.dumps({"text": "Hi.", "request_id": request_id}))
                frames, audio, _ = read_request(ws)
                assert frames[0]["type"] == "synthesis_start"
                assert frames[-1]["type"] == "error"
                assert frames[-1]["error"] == "synthesis_failed"
                assert frames[-1]["request_id"] == request_id
                assert audio == 2400 * 2
        assert app.state.tts.in_flight.depth == 0


def test_websocket_requests_share_the_admission_bound(make_app: AppFactory) -> None:
    app, _, _ = make_app(FakeEngine(segments=1), queue_max_depth=1)
    with TestClient(app) as client:
        state = app.state.tts
        assert state.ready_event.wait(10)
        assert client.portal is not None  # set while the client's context is open
        with client.websocket_connect(WS_PATH) as ws:
            assert client.portal.call(_acquire, state)  # another request holds the only slot
            ws.send_text(json.dumps({"text": "Hi.", "request_id": "over"}))
            frames, audio, _ = read_request(ws)
            assert frames == [
                {
                    "type": "error",
                    "request_id": "over",
                    "error": "queue_saturated",
                    "detail": frames[0]["detail"],
                    "queue_depth": 1,
                    "max_queue_depth": 1,
                }
            ]
            client.portal.call(_release, state)
            ws.send_text(json.dumps({"text": "Hi.", "request_id": "room"}))
            frames, audio, _ = read_request(ws)
            assert frames[-1]["type"] == "synthesis_complete"
            assert audio == 4800
        assert state.in_flight.depth == 0


async def _acquire(state: AppState) -> bool:
    return state.in_flight.try_acquire()


async def _release(state: AppState) -> None:
    state.in_flight.release()


def test_a_websocket_request_holds_a_slot_while_synthesized(make_app: AppFactory) -> None:
    hold = threading.Event()
    app, _, _ = make_app(FakeEngine(segments=1, hold=hold), queue_max_depth=1)
    with TestClient(app) as client:
        state = app.state.tts
        assert state.ready_event.wait(10)
        with client.websocket_connect(WS_PATH) as ws:
            ws.send_text(json.dumps({"text": "Hi.", "request_id": "slow"}))
            assert json.loads(ws.receive_text())["type"] == "synthesis_start"
            response = client.post("/invocations", json={"text": "HTTP too."})
            assert response.status_code == 503
            assert response.json()["queue_depth"] == 1
            hold.set()
            frames, audio, _ = read_request(ws)
            assert frames[-1]["type"] == "synthesis_complete"
            assert audio == 4800
        assert state.in_flight.depth == 0


def test_client_leaving_mid_synthesis_stops_it_and_frees_the_slot(make_app: AppFactory) -> None:
    engine = FakeEngine(segments=20, delay_s=0.05)
    app, _, metrics_out = make_app(engine, queue_max_depth=1)
    with TestClient(app) as client:
        state = app.state.tts
        assert state.ready_event.wait(10)
        with client.websocket_connect(WS_PATH) as ws:
            ws.send_text(json.dumps({"text": "Long one.", "request_id": "leaver"}))
            assert json.loads(ws.receive_text())["type"] == "synthesis_start"
            assert ws.receive_bytes()
        engine.wait_closed("leaver")
        deadline = time.monotonic() + 5
        while state.in_flight.depth and time.monotonic() < deadline:
            time.sleep(0.01)
        assert state.in_flight.depth == 0
        assert engine.produced["leaver"] < 20 - 5
    lines = [json.loads(line) for line in metrics_out.getvalue().splitlines()]
    assert [(line["request_id"], line["status"]) for line in lines] == [("leaver", "disconnected")]
