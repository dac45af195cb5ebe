"""DisconnectWatch: nothing is started for a short call; a call still running after
WATCH_AFTER_S is cancelled when the client disconnects (unless should_cancel says no)."""
import asyncio

import pytest

from gateway.request_path import disconnect_watch
from gateway.request_path.disconnect_watch import DisconnectWatch


class Client:
    def __init__(self):
        self.left = asyncio.Event()
        self.receives = 0

    async def receive(self) -> dict:
        self.receives += 1
        await self.left.wait()
        return {"type": "http.disconnect"}


def test_a_short_call_starts_no_watcher():
    async def run():
        client = Client()
        watch = DisconnectWatch(client.receive)
        await asyncio.sleep(0)
        watch.stop()
        await asyncio.sleep(disconnect_watch.WATCH_AFTER_S * 2.5)
        return client.receives, watch.watcher
    assert asyncio.run(run()) == (0, None)


def test_the_client_leaving_a_long_call_cancels_it():
    async def run():
        client = Client()
        asyncio.get_running_loop().call_later(disconnect_watch.WATCH_AFTER_S * 3,
                                              client.left.set)
        watch = DisconnectWatch(client.receive)
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            assert watch.gone
            asyncio.current_task().uncancel()
            return "gone"
        finally:
            watch.stop()
    assert asyncio.run(asyncio.wait_for(run(), 5)) == "gone"


def test_should_cancel_false_leaves_the_task_alone():
    async def run():
        client = Client()
        client.left.set()
        watch = DisconnectWatch(client.receive, lambda: False)
        await asyncio.sleep(disconnect_watch.WATCH_AFTER_S * 3)
        watch.stop()
        return watch.gone, client.receives
    assert asyncio.run(run()) == (False, 1)


def test_a_cancel_from_elsewhere_is_not_ours():
    async def run():
        watch = DisconnectWatch(Client().receive)
        task = asyncio.current_task()
        asyncio.get_running_loop().call_later(0.01, task.cancel)
        try:
            await asyncio.sleep(10)
        finally:
            watch.stop()
            assert not watch.gone
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(run())
