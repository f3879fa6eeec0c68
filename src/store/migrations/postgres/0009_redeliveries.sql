-- PostgreSQL: the failed deliveries asked for again, as migrations/sqlite/0009_redeliveries.sql.
CREATE TABLE redeliveries (
    guid        TEXT   PRIMARY KEY,
    delivery_id BIGINT NOT NULL,
    asked_at    BIGINT NOT NULL
);
