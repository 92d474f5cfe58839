-- The "tables" option: schema-qualified names, SQL identifier rules.
CREATE SCHEMA "Sales";
CREATE TABLE "Sales"."Orders" (id int PRIMARY KEY);
CREATE TABLE public.keep (id int PRIMARY KEY);
CREATE TABLE public.skip (id int PRIMARY KEY);

SELECT 'init' FROM pg_create_logical_replication_slot('filter_slot', 'trellara');

BEGIN;
INSERT INTO public.keep VALUES (1);
INSERT INTO public.skip VALUES (1);
INSERT INTO "Sales"."Orders" VALUES (1);
COMMIT;
-- only filtered-out changes: the whole transaction disappears
INSERT INTO public.skip VALUES (2);
-- truncate lists only the wanted relations
TRUNCATE public.keep, public.skip;

SELECT trellara_frame_text(data, true)
FROM pg_logical_slot_peek_binary_changes('filter_slot', NULL, NULL,
	'tables', ' public.KEEP , "Sales"."Orders"');

-- no filter (or an empty one): everything
SELECT count(*) FROM pg_logical_slot_peek_binary_changes('filter_slot', NULL, NULL);
SELECT count(*) FROM pg_logical_slot_peek_binary_changes('filter_slot', NULL, NULL, 'tables', '');

-- a name that matches nothing: nothing
SELECT count(*) FROM pg_logical_slot_peek_binary_changes('filter_slot', NULL, NULL, 'tables', 'sales.orders');

-- malformed lists are refused
SELECT count(*) FROM pg_logical_slot_peek_binary_changes('filter_slot', NULL, NULL, 'tables', 'keep');
SELECT count(*) FROM pg_logical_slot_peek_binary_changes('filter_slot', NULL, NULL, 'tables', 'public.keep,');
SELECT count(*) FROM pg_logical_slot_peek_binary_changes('filter_slot', NULL, NULL, 'tables', 'public."keep');
SELECT count(*) FROM pg_logical_slot_peek_binary_changes('filter_slot', NULL, NULL, 'tables', 'public.keep public.skip');

-- the semantics probe's tables pass any filter
CREATE TABLE public.trellara_semantics_a (id bigint PRIMARY KEY, v bigint NOT NULL);
CREATE TABLE public.trellara_semantics_c (id bigint PRIMARY KEY, v bigint NOT NULL);
INSERT INTO public.trellara_semantics_a VALUES (1, 1);
INSERT INTO public.trellara_semantics_c VALUES (1, 1);
SELECT trellara_frame_text(data, true)
FROM pg_logical_slot_peek_binary_changes('filter_slot', NULL, NULL, 'tables', 'sales.orders');

SELECT pg_drop_replication_slot('filter_slot');
DROP TABLE "Sales"."Orders", public.keep, public.skip, public.trellara_semantics_a, public.trellara_semantics_c;
DROP SCHEMA "Sales";
