DROP TABLE fleet_periodic_ticks;
DROP TABLE fleet_periodic;
