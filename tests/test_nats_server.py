import nats


def test_embedded_server_speaks_jetstream(nats_server, run):
    async def scenario():
        nc = await nats.connect(nats_server.url)
        js = nc.jetstream()
        info = await js.account_info()
        await nc.close()
        return info

    info = run(scenario())
    assert info.limits is not None


def test_store_dir_that_does_not_exist_yet_is_created(tmp_path, run):
    from jsspark.nats_server import NatsServer

    store = tmp_path / "not" / "yet"
    with NatsServer(store_dir=store) as srv:
        async def scenario():
            nc = await nats.connect(srv.url)
            info = await nc.jetstream().account_info()
            await nc.close()
            return info

        assert run(scenario()).limits is not None
    assert (store / "nats-server.log").exists()


def test_a_started_server_entered_as_a_context_runs_once_and_stops(tmp_path):
    """``with NatsServer(...).start() as srv`` started a second process on the same port; it failed
    to bind, and the first, no longer tracked, ran on after the test (a leaf/hub test left four)."""
    from jsspark.nats_server import NatsServer

    srv = NatsServer(store_dir=tmp_path / "s").start()
    first = srv.proc
    with srv:
        assert srv.proc is first and first.poll() is None
    assert first.poll() is not None
