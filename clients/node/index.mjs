// lockbroker for ES modules (`import { Client } from 'lockbroker'`): the
// objects of require('lockbroker'), so that one process that loads the
// library both ways has one copy of it (one instanceof, one set of exit
// hooks).
export * from './index.js';
export { default } from './index.js';
