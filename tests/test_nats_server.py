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
