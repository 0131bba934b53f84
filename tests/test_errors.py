from jsspark.errors import (
    APIError,
    BadRequestError,
    StreamNotFoundError,
    api_error,
    api_error_by_code,
    error_table,
)


def test_table_has_every_row_of_the_server_table():
    table = error_table()
    assert len(table) == 226
    spec = table["JSStreamWrongLastSequenceErrF"]
    assert (spec.code, spec.err_code, spec.template) == (400, 10071, "wrong last sequence: {seq}")
    # a text quoted with double quotes because it contains a single quote
    assert table["JSConsumerBadDurableNameErr"].template == "durable name can not contain '.', '*', '>'"


def test_api_error_renders_template_and_picks_class():
    e = api_error("JSStreamWrongLastSequenceErrF", seq=5)
    assert isinstance(e, BadRequestError)
    assert e.to_dict() == {"code": 400, "err_code": 10071, "description": "wrong last sequence: 5"}
    nf = api_error_by_code(10059)
    assert isinstance(nf, StreamNotFoundError)
    assert nf.description == "stream not found"


def test_from_dict_round_trips_a_server_error():
    raw = {"code": 404, "err_code": 10059, "description": "stream not found"}
    e = APIError.from_dict(raw)
    assert isinstance(e, StreamNotFoundError)
    assert e.to_dict() == raw
    assert e == api_error("JSStreamNotFoundErr")
