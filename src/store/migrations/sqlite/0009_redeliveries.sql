-- Every failed webhook delivery the bot asked the forge to deliver again,
-- by the event's delivery id (GitHub's guid, shared by every attempt). The
-- replica whose insert creates the row asks; another finds it and does not,
-- so an event is asked for once however many replicas sweep.
CREATE TABLE redeliveries (
    guid        TEXT    PRIMARY KEY,
    -- The forge's id of the failed attempt that was asked for.
    delivery_id INTEGER NOT NULL,
    asked_at    INTEGER NOT NULL
);
