-- Back to migration 6's fleet_dispatch, which leaves a comma to the constraint.
CREATE OR REPLACE FUNCTION fleet_dispatch(
    queue     text,
    name      text,
    payload   jsonb    DEFAULT '{}',
    delay     interval DEFAULT '0',
    priority  integer  DEFAULT 0,
    tags      text[]   DEFAULT NULL,
    metadata  jsonb    DEFAULT NULL,
    max_tries integer  DEFAULT NULL,
    timeout   interval DEFAULT NULL
) RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    -- The limits of queue/names.go, queue/tags.go and queue/client.go.
    max_queue_bytes    CONSTANT integer := 200;
    max_name_bytes     CONSTANT integer := 500;
    max_payload_bytes  CONSTANT integer := 1048576;
    max_tags           CONSTANT integer := 16;
    max_tag_bytes      CONSTANT integer := 100;
    max_metadata_bytes CONSTANT integer := 16384;
    controls           CONSTANT text := '[\x01-\x1f\x7f-\x9f]';
    t    text;
    i    integer := 0;
    kept text[];
    new_id bigint;
BEGIN
    IF queue IS NULL OR queue ~ '^\s*$' THEN
        RAISE EXCEPTION 'fleet_dispatch: queue must not be empty' USING ERRCODE = '22023';
    ELSIF octet_length(queue) > max_queue_bytes THEN
        RAISE EXCEPTION 'fleet_dispatch: queue must be at most % bytes, got %', max_queue_bytes, octet_length(queue)
            USING ERRCODE = '22023';
    ELSIF queue ~ controls THEN
        RAISE EXCEPTION 'fleet_dispatch: queue must not contain control characters' USING ERRCODE = '22023';
    END IF;
    IF name IS NULL OR name ~ '^\s*$' THEN
        RAISE EXCEPTION 'fleet_dispatch: name must not be empty' USING ERRCODE = '22023';
    ELSIF octet_length(name) > max_name_bytes THEN
        RAISE EXCEPTION 'fleet_dispatch: name must be at most % bytes, got %', max_name_bytes, octet_length(name)
            USING ERRCODE = '22023';
    ELSIF name ~ controls THEN
        RAISE EXCEPTION 'fleet_dispatch: name must not contain control characters' USING ERRCODE = '22023';
    END IF;
    payload := COALESCE(payload, '{}');
    IF octet_length(payload::text) > max_payload_bytes THEN
        RAISE EXCEPTION 'fleet_dispatch: payload is % bytes, more than the % allowed',
            octet_length(payload::text), max_payload_bytes USING ERRCODE = '22023';
    END IF;
    IF delay IS NULL OR delay < interval '0' THEN
        RAISE EXCEPTION 'fleet_dispatch: delay must not be negative, got %', delay USING ERRCODE = '22023';
    END IF;
    IF priority IS NULL OR priority < -100 OR priority > 100 THEN
        RAISE EXCEPTION 'fleet_dispatch: priority must be between -100 and 100, got %', priority USING ERRCODE = '22023';
    END IF;
    IF tags IS NOT NULL THEN
        FOREACH t IN ARRAY tags LOOP
            i := i + 1;
            IF t IS NULL OR t ~ '^\s*$' THEN
                RAISE EXCEPTION 'fleet_dispatch: tags[%] must not be empty', i USING ERRCODE = '22023';
            ELSIF octet_length(t) > max_tag_bytes THEN
                RAISE EXCEPTION 'fleet_dispatch: tags[%] must be at most % bytes, got %', i, max_tag_bytes, octet_length(t)
                    USING ERRCODE = '22023';
            ELSIF t ~ controls THEN
                RAISE EXCEPTION 'fleet_dispatch: tags[%] must not contain control characters', i USING ERRCODE = '22023';
            END IF;
            IF kept IS NULL OR NOT t = ANY (kept) THEN
                kept := array_append(kept, t);
            END IF;
        END LOOP;
        IF cardinality(kept) > max_tags THEN
            RAISE EXCEPTION 'fleet_dispatch: tags: at most % tags, got %', max_tags, cardinality(kept)
                USING ERRCODE = '22023';
        END IF;
    END IF;
    IF metadata IS NOT NULL THEN
        IF jsonb_typeof(metadata) <> 'object' THEN
            RAISE EXCEPTION 'fleet_dispatch: metadata must be a JSON object' USING ERRCODE = '22023';
        ELSIF octet_length(metadata::text) > max_metadata_bytes THEN
            RAISE EXCEPTION 'fleet_dispatch: metadata is % bytes, more than the % allowed',
                octet_length(metadata::text), max_metadata_bytes USING ERRCODE = '22023';
        END IF;
    END IF;
    IF max_tries IS NOT NULL AND max_tries < 1 THEN
        RAISE EXCEPTION 'fleet_dispatch: max_tries must be at least 1, got %', max_tries USING ERRCODE = '22023';
    END IF;
    IF timeout IS NOT NULL AND timeout < interval '1 millisecond' THEN
        RAISE EXCEPTION 'fleet_dispatch: timeout must be at least 1ms, got %', timeout USING ERRCODE = '22023';
    END IF;
    INSERT INTO queue_jobs AS j (queue, name, payload, max_tries, timeout_ms, available_at, priority, tags, metadata)
    VALUES (fleet_dispatch.queue, fleet_dispatch.name, payload, max_tries,
            (EXTRACT(EPOCH FROM timeout) * 1000)::bigint, now() + delay, fleet_dispatch.priority, kept, metadata)
    RETURNING j.id INTO new_id;
    IF delay = interval '0' THEN
        PERFORM pg_notify('queue_jobs', fleet_dispatch.queue);
    END IF;
    RETURN new_id;
END;
$$;
